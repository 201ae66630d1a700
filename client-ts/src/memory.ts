import { createHash } from "node:crypto";
import { effectiveCost, wireResource, type CheckRequest, type Decision } from "./decision.js";

/**
 * denialKey identifies a request exactly: a digest of its key, address,
 * resource and cost. The address is part of it even with a key, because
 * a plan may have per-address rules; a digest keeps API keys out of
 * memory.
 */
export function denialKey(r: CheckRequest): string {
  const h = createHash("sha256");
  for (const s of [r.key ?? "", r.ip ?? "", wireResource(r)]) {
    const bytes = Buffer.from(s, "utf8");
    const length = Buffer.alloc(8);
    length.writeBigUInt64BE(BigInt(bytes.length));
    h.update(length).update(bytes);
  }
  const cost = Buffer.alloc(8);
  cost.writeBigUInt64BE(BigInt(effectiveCost(r)));
  return h.update(cost).digest("base64");
}

interface Denial {
  /** When the request that was denied was sent, in milliseconds since the epoch. */
  askedAt: number;
  /** askedAt plus the wait the server gave. */
  until: number;
  decision: Decision;
}

/**
 * Denials remembers recent denials until their wait has passed, at most
 * `size` of them, the least recently used out first.
 */
export class Denials {
  readonly #size: number;
  /** In order of use: the first is the least recently used. */
  readonly #entries = new Map<string, Denial>();

  constructor(size: number) {
    this.#size = size;
  }

  /**
   * remember records d, the answer to a request sent at askedAt. Counting
   * the wait from the sending, not from the answer, means the request is
   * never denied locally for longer than the server said.
   */
  remember(key: string, d: Decision, askedAt: number): void {
    this.#entries.delete(key);
    while (this.#entries.size >= this.#size) {
      const oldest = this.#entries.keys().next();
      if (oldest.done) break;
      this.#entries.delete(oldest.value);
    }
    this.#entries.set(key, { askedAt, until: askedAt + d.retry_after_ms, decision: d });
  }

  /**
   * lookup returns the remembered denial of key as of now, its waits
   * shortened by the time that has passed, or undefined when there is
   * none or its wait has passed.
   */
  lookup(key: string, now: number): Decision | undefined {
    const e = this.#entries.get(key);
    if (e === undefined) {
      return undefined;
    }
    this.#entries.delete(key);
    if (now >= e.until) {
      return undefined;
    }
    this.#entries.set(key, e); // now the most recently used
    return at(e, now);
  }

  /** The number of denials remembered. */
  get size(): number {
    return this.#entries.size;
  }
}

/** at returns the remembered decision as it stands at now (before until). */
function at(e: Denial, now: number): Decision {
  const elapsed = now - e.askedAt;
  const d: Decision = {
    ...e.decision,
    remembered: true,
    retry_after_ms: Math.ceil(e.until - now),
    rules: e.decision.rules.map((r) => ({
      ...r,
      reset_after_ms: shorten(r.reset_after_ms, elapsed),
      retry_after_ms: shorten(r.retry_after_ms, elapsed),
    })),
    headers: { ...e.decision.headers, "Retry-After": String(ceilDiv(Math.ceil(e.until - now), 1000)) },
  };
  if (d.reset_after_ms !== undefined) {
    d.reset_after_ms = shorten(d.reset_after_ms, elapsed);
  }
  const rateLimit = d.headers["RateLimit"];
  if (rateLimit !== undefined && d.policy) {
    d.headers["RateLimit"] = withReset(rateLimit, ceilDiv(d.reset_after_ms ?? 0, 1000));
  }
  return d;
}

/** shorten subtracts elapsed from a positive wait, down to 0; 0 and -1 ("never") stay as they are. */
function shorten(ms: number, elapsed: number): number {
  return ms <= 0 ? ms : Math.max(0, ms - elapsed);
}

/** ceilDiv divides a positive a by b, rounding up; 0 for a ≤ 0. */
export function ceilDiv(a: number, b: number): number {
  return a <= 0 ? 0 : Math.ceil(a / b);
}

/** withReset sets the t (seconds until reset) parameter of a RateLimit value such as `"hourly";r=0;t=3`. */
function withReset(v: string, seconds: number): string {
  const parts = v.split(";");
  const i = parts.findIndex((p) => p.trim().startsWith("t="));
  if (i < 0) {
    return v;
  }
  parts[i] = `t=${seconds}`;
  return parts.join(";");
}
