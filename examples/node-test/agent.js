// A scripted stand-in for a coding agent. Each invocation adds the next larger unit duration.js
// lacks to the top of its table (minutes, then hours, then days), and stops. It never touches a test.
'use strict';
const fs = require('node:fs');

const units = ["  ['m', 60],", "  ['h', 3600],", "  ['d', 86400],"];
const source = fs.readFileSync('duration.js', 'utf8');
const next = units.find((line) => !source.includes(line));
if (next === undefined) {
  console.log('agent: nothing left to fix');
} else {
  fs.writeFileSync('duration.js', source.replace('const UNITS = [\n', `const UNITS = [\n${next}\n`));
  console.log(`agent: added ${next.trim()}`);
}
