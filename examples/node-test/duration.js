// Durations in words ("1h 1m 1s"). The unit table starts out incomplete on purpose; the example's
// agent (agent.js) adds the next larger unit it lacks, one per iteration.
'use strict';

// The units, largest first: `format` writes each one that divides into what is left.
const UNITS = [
  ['s', 1],
];

function format(seconds) {
  if (seconds === 0) {
    return '0s';
  }
  const parts = [];
  let left = seconds;
  for (const [name, size] of UNITS) {
    const count = Math.floor(left / size);
    if (count > 0) {
      parts.push(`${count}${name}`);
    }
    left -= count * size;
  }
  return parts.join(' ');
}

module.exports = { format };
