import type { components } from "./openapi.js";

/** WireDecision is the body of a 200 from POST /v1/check. */
export type WireDecision = components["schemas"]["Decision"];
/** RuleResult is one rule's part of a decision. */
export type RuleResult = components["schemas"]["RuleResult"];
/** WireCheckRequest is the body of POST /v1/check. */
export type WireCheckRequest = components["schemas"]["CheckRequest"];
/** SettleRequest is the body of POST /v1/settle. */
export type SettleRequest = components["schemas"]["SettleRequest"];
/**
 * Settlement is the check API's answer to a settlement: `cost` is the
 * units the hold counts (and bills); `status` is "settled", or
 * "refunded" / "charged" for a hold that expired unsettled; `repeated`
 * is true when it repeats an earlier settlement, which changed nothing.
 */
export type Settlement = components["schemas"]["Settlement"];
/** LeaseRequest is the body of POST /v1/renew and /v1/release. */
export type LeaseRequest = components["schemas"]["LeaseRequest"];
/**
 * Lease is the check API's answer to a renewal (`expires_at`: when the
 * lease's first slot is freed unless renewed again) or a release
 * (`released`: whether a slot was still held).
 */
export type Lease = components["schemas"]["Lease"];

/**
 * Standing is where an API key stands now with every rule of its plan:
 * the answer of GET /v1/me (`TollgateClient.me`). `rules` has each rule
 * of the plan, whatever its resource, with what it has left now;
 * `quota` is the calendar month's units against the plan's included
 * units (absent when the plan has no quota on the check path); `credits`
 * the tenant's prepaid balance, when its plan draws on credits.
 */
export type Standing = components["schemas"]["Standing"];
/** RuleStanding is one rule of the plan and what it has left now (`remaining`; `reset_after_ms` until full again, -1 never). */
export type RuleStanding = components["schemas"]["RuleStanding"];
/**
 * QuotaStanding is the calendar month's units against the plan's
 * included units. Mode "shadow" is an overage quota: units beyond it are
 * billed, and `used` counts them too.
 */
export type QuotaStanding = components["schemas"]["QuotaStanding"];
/** CreditsStanding is the tenant's prepaid balance now, when its plan draws on credits. */
export type CreditsStanding = components["schemas"]["CreditsStanding"];

/**
 * Reasons a decision gives. The check API may add reasons: treat an
 * unknown one by `allowed`.
 */
export const Reason = {
  OK: "ok",
  RateLimited: "rate_limited",
  /** The tenant's monthly spend cap is reached; retry after `retry_after_ms` (the month's end). */
  SpendCap: "spend_cap",
  /** The tenant's prepaid balance cannot cover the cost; `retry_after_ms` is -1 (until a top-up). */
  CreditsExhausted: "credits_exhausted",
  InvalidKey: "invalid_key",
  KeyRevoked: "key_revoked",
  KeyExpired: "key_expired",
  TenantSuspended: "tenant_suspended",
  /** A fail-closed rule could not be evaluated, or the client could not reach the check API and fails closed. */
  Unavailable: "unavailable",
  /** The caller is anonymous and anonymous callers have no plan. */
  KeyRequired: "key_required",
} as const;

/**
 * CheckRequest is one question to the check API: may this caller make
 * this request now? Every field is optional; each one's absence is the
 * server's default.
 */
export interface CheckRequest {
  /** The end caller's API key; absent for an anonymous caller. */
  key?: string;
  /**
   * The end caller's address (IPv4 or IPv6). Required without `key`;
   * with a key it feeds the plan's per-address rules.
   */
  ip?: string;
  /**
   * What is accessed: a path such as "/repos" when `method` is given,
   * else the whole resource, e.g. "GET /repos"; absent means "*".
   */
  resource?: string;
  /** The HTTP method; when given, the resource sent is `${method} ${resource}`. */
  method?: string;
  /**
   * The units the request consumes: a safe integer ≥ 0; absent or 0 means
   * 1, the server's default. Set `peek` to consume nothing. Any other
   * number (a fraction, NaN, Infinity, a negative) makes `check` reject
   * with a TypeError, without asking.
   */
  cost?: number;
  /** Evaluate with cost 0: the decision says whether a request could pass and consumes nothing. */
  peek?: boolean;
  /** Evaluate, consume nothing and record no usage. */
  dryRun?: boolean;
  /**
   * Take `cost` as an estimate: an admitted check opens a hold
   * (`hold_id` of the decision) to settle at the actual cost with
   * `TollgateClient.settle`. Not with `dryRun`.
   */
  hold?: boolean;
  /**
   * How long the hold stays open unsettled, in seconds (a fraction counts
   * as a whole one); absent or 0 for the rules' default. Sent with `hold`
   * and with `autoHold` (then it applies when a rule opens a hold; a check
   * API older than the one that accepts it with auto_hold refuses it, a
   * 422). Not finite or negative: `check` rejects with a TypeError.
   */
  holdTtlS?: number;
  /**
   * Open a hold, as `hold` does, only when a matching rule asks for one
   * (its option hold); otherwise the check is a plain one. Ignored with
   * `hold`. The middleware sets it unless its option `hold` is given.
   */
  autoHold?: boolean;
  /** Ends the check early; the check then rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * Decision is the check API's answer, or one the client made itself (see
 * `remembered` and `degraded`). Its wire fields keep their names
 * (`retry_after_ms`…); durations are milliseconds, rounded up by the
 * server. `limit`, `remaining`, `reset_after_ms` and `policy` describe the
 * governing rule and are absent when no rule applied.
 */
export interface Decision extends Omit<WireDecision, "tier"> {
  /** "authenticated" or "anonymous"; absent on a decision the client made because it could not ask. */
  tier?: WireDecision["tier"];
  /**
   * The rate-limit headers of the answer (RateLimit-Policy, RateLimit,
   * X-RateLimit-*, Retry-After) by their canonical names, values exactly
   * as the check API sent them, ready to copy to a response.
   */
  headers: Record<string, string>;
  /** True when the client denied the request itself, from an earlier denial whose wait has not passed, without asking. */
  remembered: boolean;
  /** Why the client could not ask the check API, when its fail mode decided; absent otherwise. */
  cause?: Error;
}

/** rateLimitHeaders are the headers of a decision worth passing on, by their canonical names. */
export const rateLimitHeaders = [
  "RateLimit-Policy",
  "RateLimit",
  "X-RateLimit-Limit",
  "X-RateLimit-Remaining",
  "X-RateLimit-Used",
  "X-RateLimit-Reset",
  "Retry-After",
] as const;

/** pickRateLimitHeaders returns the rate-limit headers of h. */
export function pickRateLimitHeaders(h: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of rateLimitHeaders) {
    const v = h.get(name);
    if (v !== null) {
      out[name] = v;
    }
  }
  return out;
}

/** isCost reports whether cost is a cost the check API takes: a safe integer ≥ 0. */
export function isCost(cost: unknown): cost is number {
  return Number.isSafeInteger(cost) && (cost as number) >= 0;
}

/**
 * checkCost throws a TypeError, naming what (op) it is of, when cost is
 * not a safe integer ≥ 0: JSON would send NaN and Infinity as null (the
 * server's default cost) and a fraction the server refuses.
 */
export function checkCost(op: string, cost: unknown): void {
  if (!isCost(cost)) {
    throw new TypeError(`tollgate: ${op}: cost ${String(cost)} is not an integer ≥ 0`);
  }
}

/** validateCheck throws a TypeError when r's cost or holdTtlS cannot be sent as it is. */
export function validateCheck(r: CheckRequest): void {
  if (r.cost !== undefined) {
    checkCost("check", r.cost);
  }
  if (r.holdTtlS !== undefined && !(Number.isFinite(r.holdTtlS) && r.holdTtlS >= 0)) {
    throw new TypeError(`tollgate: check: holdTtlS ${String(r.holdTtlS)} is not a number of seconds ≥ 0`);
  }
}

/** maxLeaseLeftMs is the longest lease TTL, an hour: a lease never has more left. */
const maxLeaseLeftMs = 3_600_000;

/** maxHoldLeftMs is the longest hold TTL, a day (hold_ttl_s at most 86400). */
const maxHoldLeftMs = 86_400_000;

/**
 * TimesLeft is the remaining life of a decision's lease and hold, or of a
 * renewal's lease, in milliseconds, when the answer arrived.
 */
export interface TimesLeft {
  lease?: number;
  hold?: number;
}

/** timesLeft holds the TimesLeft of each decision with a lease or hold, and each renewal, the client received. */
const timesLeft = new WeakMap<object, TimesLeft>();

/**
 * noteTimesLeft records, for the middleware to renew and settle by, the
 * remaining life of the lease and the hold of answer, a decision or a
 * renewal that arrived with the Date header date at the local time now,
 * and whose lease expires at leaseExpiresAt, its hold at holdExpiresAt
 * (see leaseLeftMs). leaseTtlMs, the lease's remaining life by the
 * server's clock (a decision's lease_ttl_ms, a renewal's ttl_ms), is
 * taken as it is when the server sends it (older servers do not).
 */
export function noteTimesLeft(
  answer: object, leaseExpiresAt: string | undefined, holdExpiresAt: string | undefined, date: string | null, now: number,
  leaseTtlMs?: number,
): void {
  const left: TimesLeft = {};
  if (typeof leaseTtlMs === "number" && Number.isSafeInteger(leaseTtlMs) && leaseExpiresAt !== undefined) {
    // The server's own count of what the lease has left (lease_ttl_ms,
    // ttl_ms): exact to the millisecond, where Date is whole seconds.
    left.lease = Math.min(Math.max(leaseTtlMs, 0), maxLeaseLeftMs);
  } else if (leaseExpiresAt !== undefined) {
    left.lease = leaseLeftMs(leaseExpiresAt, date, now);
  }
  if (holdExpiresAt !== undefined) {
    left.hold = timeLeftMs(holdExpiresAt, date, now, maxHoldLeftMs);
  }
  timesLeft.set(answer, left);
}

/**
 * timesLeftOf returns the remaining life of the lease and hold of answer,
 * a decision or a renewal of the client, when it arrived; a field is
 * undefined when there is none or its expiry could not be read.
 */
export function timesLeftOf(answer: object): TimesLeft {
  return timesLeft.get(answer) ?? {};
}

/**
 * leaseLeftMs returns how long a lease that expires at expiresAt (RFC
 * 3339, the server's clock) has left, in milliseconds, when an answer
 * whose Date header is date (the server's clock too, whole seconds)
 * arrived: expiresAt − date − 1 s, since Date truncates to the second,
 * so never more than is left, whatever the local clock says. Without a
 * Date it falls back on the local clock (now). Undefined when expiresAt
 * cannot be read; 0 at the least, an hour at the most.
 */
export function leaseLeftMs(expiresAt: string | undefined, date: string | null, now: number): number | undefined {
  return timeLeftMs(expiresAt, date, now, maxLeaseLeftMs);
}

/** timeLeftMs is leaseLeftMs for anything that expires at expiresAt, at most maxMs. */
function timeLeftMs(expiresAt: string | undefined, date: string | null, now: number, maxMs: number): number | undefined {
  const expires = expiresAt === undefined ? Number.NaN : Date.parse(expiresAt);
  if (Number.isNaN(expires)) {
    return undefined;
  }
  const serverNow = date === null ? Number.NaN : Date.parse(date);
  const left = Number.isNaN(serverNow) ? expires - now : expires - serverNow - 1000;
  return Math.min(Math.max(left, 0), maxMs);
}

/** effectiveCost is the cost the server is asked to charge for r. */
export function effectiveCost(r: CheckRequest): number {
  if (r.peek) {
    return 0;
  }
  return r.cost === undefined || r.cost === 0 ? 1 : r.cost;
}

/** wireResource is the resource sent for r ("*" when it names none). */
export function wireResource(r: CheckRequest): string {
  const resource = r.resource ?? "";
  if (r.method) {
    return `${r.method.toUpperCase()} ${resource || "/"}`;
  }
  return resource || "*";
}

/**
 * toWire returns the body of POST /v1/check for r. hold_ttl_s goes with
 * auto_hold too: it is the TTL of the hold a rule opens. The caller
 * validates r first (validateCheck).
 */
export function toWire(r: CheckRequest): WireCheckRequest {
  const body: WireCheckRequest = { cost: effectiveCost(r) };
  if (r.key) body.key = r.key;
  if (r.ip) body.ip = r.ip;
  const resource = wireResource(r);
  if (resource !== "*") body.resource = resource;
  if (r.dryRun) body.dry_run = true;
  if (r.hold) body.hold = true;
  else if (r.autoHold) body.auto_hold = true;
  if (r.holdTtlS !== undefined && r.holdTtlS > 0) body.hold_ttl_s = Math.ceil(r.holdTtlS);
  return body;
}
