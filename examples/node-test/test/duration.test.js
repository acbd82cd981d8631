'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { format } = require('../duration.js');

test('zero is 0s', () => assert.strictEqual(format(0), '0s'));
test('seconds alone', () => assert.strictEqual(format(59), '59s'));
test('a minute', () => assert.strictEqual(format(60), '1m'));
test('a minute and a second', () => assert.strictEqual(format(61), '1m 1s'));
test('an hour', () => assert.strictEqual(format(3600), '1h'));
test('an hour, a minute and a second', () => assert.strictEqual(format(3661), '1h 1m 1s'));
test('a day', () => assert.strictEqual(format(86400), '1d'));
