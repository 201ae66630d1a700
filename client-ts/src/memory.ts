import { createHash } from "node:crypto";
import { effectiveCost, Reason, wireResource, type CheckRequest, type Decision } from "./decision.js";

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

/**
 * maxMemoryAgeMs bounds how long a client remembers a denial, whatever the
 * wait the server gave. Some waits are upper bounds that something else
 * can cut short: a monthly quota's or a spend cap's runs to the month's
 * end, yet a plan upgrade, a raised cap or a settlement in another
 * process may admit the request any time. Past it the client asks again,
 * so such a change is seen within a second: the same bound the check API
 * puts on the denials it remembers itself (maxDenialLife in
 * internal/enforce), and the Go SDK's MaxMemoryAge.
 */
export const maxMemoryAgeMs = 1000;

/**
 * remembers reports whether d, the server's answer, is a denial to
 * remember: a rate decision (rate_limited or spend_cap) with a positive
 * wait. Not remembered: a denial by a concurrency rule (its wait is when
 * a lease expires at the latest, but any request in flight that ends
 * frees a slot, here or in another process; the check API never denies
 * such rules locally either), a degraded or unavailable answer (only a
 * check tells when the limiter is back), credits_exhausted (a wait of -1,
 * until a top-up), a key or tenant refused (no wait), and any reason the
 * client does not know. A monthly quota or a spend cap is remembered like
 * other rate decisions: maxMemoryAgeMs bounds it, and the client's own
 * settlements forget it at once.
 */
export function remembers(d: Decision): boolean {
  if (d.allowed || d.retry_after_ms <= 0 || d.degraded) {
    return false;
  }
  if (d.reason !== Reason.RateLimited && d.reason !== Reason.SpendCap) {
    return false;
  }
  return !d.rules.some((r) => !r.allowed && r.algorithm === "concurrency");
}

/**
 * ownerTag returns the tag of whose units a check counts: its tenant
 * (from the decision), else its API key, else its address, hashed to a
 * byte. Units given back (a settlement, a release) may admit any request
 * of the same tenant, not only of the same key, since rules may count per
 * tenant; tags that collide only forget more.
 */
export function ownerTag(tenantId: string | undefined, key: string | undefined, ip: string | undefined): number {
  const s = tenantId || key || ip || "";
  let h = 2166136261; // FNV-1a
  for (let i = 0; i < s.length; i++) {
    h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  }
  return (h ^ (h >>> 8) ^ (h >>> 16) ^ (h >>> 24)) & 0xff;
}

interface Denial {
  /** ownerTag of the check. */
  owner: number;
  /** The client's give-back count when the check was sent (Denials.sent). */
  sentGen: number;
  /** When the request that was denied was sent, in milliseconds since the epoch. */
  askedAt: number;
  /** askedAt plus the wait the server gave. */
  until: number;
  /** When the denial is forgotten: until, or askedAt + maxMemoryAgeMs if sooner. */
  expires: number;
  decision: Decision;
}

/**
 * Denials remembers recent denials until their wait or maxMemoryAgeMs has
 * passed, at most `size` of them, the least recently used out first, and
 * forgets those of an owner the client gave units back to.
 */
export class Denials {
  readonly #size: number;
  /** In order of use: the first is the least recently used. */
  readonly #entries = new Map<string, Denial>();
  /** The give-backs of the client (settlements and releases). */
  #givenBacks = 0;
  /**
   * Per owner tag, the count of the last give-back under it; #givenAll
   * that of the last one whose owner is not known. A denial learned from
   * a check sent before it is stale.
   */
  readonly #givenAt = new Float64Array(256);
  #givenAll = 0;
  /**
   * The hold and lease IDs the client's admitted checks were given, to
   * the owner tag of those checks, until settled or released; at most
   * `size` of them (an ID forgotten, or never seen, forgets every owner's
   * denials when given back).
   */
  readonly #grants = new Map<string, number>();

  constructor(size: number) {
    this.#size = size;
  }

  /** sent returns what a check about to be sent passes to remember as sentGen. */
  sent(): number {
    return this.#givenBacks;
  }

  /**
   * remember records d, the answer to a check of owner sent at askedAt,
   * when sent() was sentGen. Counting the wait from the sending, not from
   * the answer, means the request is never denied locally for longer than
   * the server said.
   */
  remember(key: string, owner: number, d: Decision, askedAt: number, sentGen: number): void {
    const until = askedAt + d.retry_after_ms;
    const e: Denial = { owner, sentGen, askedAt, until, expires: Math.min(until, askedAt + maxMemoryAgeMs), decision: d };
    if (this.#stale(e)) {
      return; // units were given back while the check was under way
    }
    this.#entries.delete(key);
    while (this.#entries.size >= this.#size) {
      const oldest = this.#entries.keys().next();
      if (oldest.done) break;
      this.#entries.delete(oldest.value);
    }
    this.#entries.set(key, e);
  }

  /**
   * lookup returns the remembered denial of key as of now, its waits
   * shortened by the time that has passed, or undefined when there is
   * none, it has expired, or units were given back to its owner since.
   */
  lookup(key: string, now: number): Decision | undefined {
    const e = this.#entries.get(key);
    if (e === undefined) {
      return undefined;
    }
    this.#entries.delete(key);
    if (now >= e.expires || this.#stale(e)) {
      return undefined;
    }
    this.#entries.set(key, e); // now the most recently used
    return at(e, now);
  }

  /** granted notes that an admitted check of owner was given holdId and leaseId (either may be absent, or both the same). */
  granted(owner: number, holdId: string | undefined, leaseId: string | undefined): void {
    for (const id of [holdId, leaseId]) {
      if (!id) {
        continue;
      }
      if (!this.#grants.has(id) && this.#grants.size >= this.#size) {
        const oldest = this.#grants.keys().next();
        if (!oldest.done) this.#grants.delete(oldest.value);
      }
      this.#grants.set(id, owner);
    }
  }

  /**
   * givenBack forgets the denials of the owner of hold or lease id, which
   * the client settled or released (whether or not the server did: it may
   * have, and asking again is always safe), or every denial when id was
   * not granted to the client or is forgotten.
   */
  givenBack(id: string): void {
    const n = ++this.#givenBacks;
    const owner = this.#grants.get(id);
    if (owner === undefined) {
      this.#givenAll = n;
      return;
    }
    this.#grants.delete(id);
    this.#givenAt[owner] = n;
  }

  /** The number of denials remembered. */
  get size(): number {
    return this.#entries.size;
  }

  /** #stale reports whether e was learned before a give-back of its owner. */
  #stale(e: Denial): boolean {
    return Math.max(this.#givenAt[e.owner] ?? 0, this.#givenAll) > e.sentGen;
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
