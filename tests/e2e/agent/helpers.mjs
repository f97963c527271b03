// Assertions shared by the sdk_*.mjs files.
export function assertEq(actual, expected, what = 'value') {
  const a = JSON.stringify(actual);
  const b = JSON.stringify(expected);
  if (a !== b) throw new Error(`${what}: expected ${b}, got ${a}`);
}

export function assert(cond, what) {
  if (!cond) throw new Error(`assertion failed: ${what}`);
}

// Expects `promise` to reject with an instance of `cls` (an SDK error class); returns it.
export async function rejects(promise, cls, what = 'call') {
  try {
    await promise;
  } catch (e) {
    if (cls && !(e instanceof cls)) {
      throw new Error(`${what}: expected ${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
    }
    return e;
  }
  throw new Error(`${what}: expected a rejection with ${cls ? cls.name : 'an error'}`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

