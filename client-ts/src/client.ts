import {
  checkCost, noteTimesLeft, pickRateLimitHeaders, Reason, toWire, validateCheck, type CheckRequest, type Decision, type LeaseRequest, type Lease, type SettleRequest, type Settlement,
  type Standing, type WireDecision,
} from "./decision.js";
import { Denials, denialKey, ownerTag, remembers } from "./memory.js";
import { isOutage, ProblemError, readProblem } from "./problem.js";

/** Defaults of ClientOptions. */
export const defaultTimeoutMs = 500;
export const defaultMemorySize = 10_000;

/**
 * maxKeyLength is the longest API key, in UTF-8 bytes, that `check` sends
 * to the check API. Tollgate's keys have 39 characters; a longer one
 * cannot be valid, and one of 16 KiB would make the check's body larger
 * than the check API accepts, a refusal (413) instead of a denial.
 */
export const maxKeyLength = 1024;

/**
 * FailMode says what a client decides when it cannot ask the check API:
 * "open" allows (the default, like the server's rules: an outage of the
 * rate limiter does not become an outage of the service), "closed" denies
 * with reason `unavailable` and a one-second Retry-After.
 */
export type FailMode = "open" | "closed";

/** ClientOptions configures a TollgateClient. */
export interface ClientOptions {
  /** Where the check API is, e.g. "http://tollgate:8080". */
  baseUrl: string;
  /** A service token issued with `admin tokens issue` or the admin API. */
  serviceToken: string;
  /**
   * Bounds one check, connecting included, in milliseconds (default 500).
   * Past it, failMode decides. It bounds a settlement, renewal or release
   * too unless the call says otherwise.
   */
  timeoutMs?: number;
  /**
   * Decides when the check API cannot be asked: it cannot be reached,
   * times out, answers 5xx, or something in between answers 408 or 429
   * (default "open"). Any other answer that is not a decision rejects,
   * whatever the fail mode. See `check`.
   */
  failMode?: FailMode;
  /**
   * Bounds the denials remembered to answer repeated requests locally
   * (default 10,000); negative turns remembering off. A denial is
   * remembered until its wait has passed, but for at most maxMemoryAgeMs
   * (one second, as the check API's own local denials), and is forgotten
   * when the client settles or releases a hold or lease of the same
   * tenant (see `check`).
   */
  memorySize?: number;
  /** Sends the checks (default the global fetch). */
  fetch?: typeof fetch;
  /** The clock of remembered denials, in milliseconds since the epoch (default Date.now). */
  now?: () => number;
}

/** maxDecisionBody bounds the decision, settlement, lease or standing read, in characters; real decisions are a few hundred per rule. */
const maxDecisionBody = 1 << 20;

/**
 * TollgateClient is a client of the check API. Create one per process and
 * share it: it holds the remembered denials, and the global fetch reuses
 * connections.
 */
export class TollgateClient {
  readonly #checkUrl: string;
  readonly #settleUrl: string;
  readonly #meUrl: string;
  readonly #base: string;
  readonly #token: string;
  readonly #timeoutMs: number;
  readonly #failMode: FailMode;
  readonly #memory: Denials | undefined;
  readonly #fetch: typeof fetch;
  readonly #now: () => number;

  /**
   * Throws when baseUrl is not an http(s) URL without query or fragment,
   * when the service token is empty, or failMode is neither "open" nor
   * "closed".
   */
  constructor(opts: ClientOptions) {
    const base = parseBaseUrl(opts.baseUrl);
    this.#checkUrl = base + "/v1/check";
    this.#settleUrl = base + "/v1/settle";
    this.#meUrl = base + "/v1/me";
    this.#base = base;
    if (!opts.serviceToken?.trim()) {
      throw new Error("tollgate: the service token is empty");
    }
    this.#token = opts.serviceToken;
    this.#timeoutMs = opts.timeoutMs !== undefined && opts.timeoutMs > 0 ? opts.timeoutMs : defaultTimeoutMs;
    this.#failMode = opts.failMode ?? "open";
    if (this.#failMode !== "open" && this.#failMode !== "closed") {
      throw new Error(`tollgate: failMode ${JSON.stringify(opts.failMode)}: want "open" or "closed"`);
    }
    const size = opts.memorySize ?? 0;
    this.#memory = size < 0 ? undefined : new Denials(size === 0 ? defaultMemorySize : size);
    this.#fetch = opts.fetch ?? globalThis.fetch;
    this.#now = opts.now ?? Date.now;
  }

  /** timeoutMs is the bound of one check, in milliseconds (ClientOptions.timeoutMs). */
  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  /**
   * check asks whether req may proceed now. Every decision of the server
   * is a Decision, and so is an outage, when the check API could not be
   * asked (unreachable, no answer within timeoutMs, a 5xx, or a 408 or
   * 429, which the check API never answers to a check but a proxy or load
   * balancer in between does): the fail mode decides it, with `degraded`
   * set and the reason in `cause`.
   *
   * Any other answer rejects, so that the middleware fails closed on it
   * whatever the fail mode: with a ProblemError for any other status —
   * the check API's refusal, 400, 401 (a bad service token), 413 or 422
   * (invalid values; `errors` names them), or something in between
   * refusing the check for it (a WAF's 403 on a key that looks like an
   * attack, a 404 or 405: the base URL is not a check API) — and with an
   * Error for a 200 whose body is not a decision. It also rejects with
   * req.signal's reason when the signal aborted. Those answers are not
   * outages to ride out: a caller who could provoke one (a WAF blocks a
   * body by its contents) would otherwise be let through, past every
   * limit, by the fail mode "open".
   *
   * A key longer than maxKeyLength is denied as invalid_key without
   * asking: no API key is that long, and the check API would refuse the
   * body (413) before it could say so.
   *
   * A request the server denied as rate_limited or spend_cap with a
   * positive retry_after_ms is denied again without a round trip
   * (`remembered`) until that wait or maxMemoryAgeMs has passed, whichever
   * comes first, or until the client settles a hold or releases a lease
   * of the same tenant (of the same address for an anonymous caller):
   * those give units back. Denials by a concurrency rule, degraded ones
   * and unavailable ones are not remembered: a slot may free at any time,
   * and only a check tells when the limiter is back. With `hold` it is the
   * same request: a denial opens no hold, so the remembered one answers it
   * too, as the Go SDK does.
   *
   * It rejects with a TypeError, without asking, when req.cost is not a
   * safe integer ≥ 0 or req.holdTtlS is not a number ≥ 0.
   */
  async check(req: CheckRequest): Promise<Decision> {
    validateCheck(req);
    if (req.key !== undefined && Buffer.byteLength(req.key) > maxKeyLength) {
      return {
        allowed: false, reason: Reason.InvalidKey, tier: "authenticated", retry_after_ms: 0, degraded: false, rules: [],
        headers: {}, remembered: false,
      };
    }
    const key = this.#memory === undefined ? "" : denialKey(req);
    const known = this.#memory?.lookup(key, this.#now());
    if (known !== undefined) {
      return known;
    }
    const sentGen = this.#memory?.sent() ?? 0;
    const askedAt = this.#now();
    let d: Decision;
    try {
      d = await this.#post(req);
    } catch (err) {
      req.signal?.throwIfAborted();
      if (!unasked(err)) {
        throw err;
      }
      return this.#fail(err);
    }
    if (this.#memory !== undefined) {
      if (d.allowed) {
        if (d.hold_id || d.lease_id) {
          this.#memory.granted(ownerTag(d.tenant_id, req.key, req.ip), d.hold_id, d.lease_id);
        }
      } else if (remembers(d)) {
        this.#memory.remember(key, ownerTag(d.tenant_id, req.key, req.ip), d, askedAt, sentGen);
      }
    }
    return d;
  }

  /**
   * settle sets the actual cost of the hold holdId that a check with
   * `hold` opened: the difference to its estimate is given back (cost 0
   * gives everything back) or taken, even past the limit. Settling again
   * at the same cost answers the same settlement with `repeated` set.
   *
   * It rejects with a ProblemError when the server refused it — 404 for
   * an unknown or long expired hold, 409 for another cost than an earlier
   * settlement's, 422 for invalid values (`errors` names them), or any
   * other error answer; 503 when the limiter store did not answer, worth
   * retrying at the same cost — and otherwise with the transport or
   * decoding error, or signal's reason when it aborted. It is bounded by
   * timeoutMs, by default the client's, like a check; there is no fail
   * mode: an unsettled hold expires by its TTL. Either way the client
   * forgets the denials it remembers of the hold's tenant (of every
   * caller, for a hold it did not open).
   *
   * It rejects with a TypeError, without asking, when cost is not a safe
   * integer ≥ 0.
   */
  async settle(holdId: string, cost: number, signal?: AbortSignal, timeoutMs?: number): Promise<Settlement> {
    checkCost("settle", cost);
    const body: SettleRequest = { hold_id: holdId, cost };
    try {
      return parseSettlement((await this.#ask("settle", this.#settleUrl, body, signal, undefined, timeoutMs)).text);
    } finally {
      this.#memory?.givenBack(holdId);
    }
  }

  /**
   * renew renews the lease leaseId that a check under concurrency rules
   * took (`lease_id` of the decision): each slot it holds then expires its
   * rule's lease TTL from now (`expires_at`, by the server's clock: count
   * the time left from the answer's Date header, not from the local
   * clock, which may disagree). Renew well before it. It rejects with a ProblemError 404 once the lease
   * expired or was released (its slot may be someone else's: end the
   * request), 422 for a malformed ID, and otherwise with an Error
   * (`tollgate: renew: …`) when the check API cannot be reached or its
   * answer is not a lease, as settle does.
   */
  renew(leaseId: string, signal?: AbortSignal, timeoutMs?: number): Promise<Lease> {
    return this.#lease("renew", leaseId, signal, timeoutMs);
  }

  /**
   * release frees the slots of lease leaseId when its request ends;
   * `released` is false when none was still held (released before, or
   * expired). Settling the check's hold releases its lease too. It
   * rejects as renew does. Either way the client forgets the denials it
   * remembers of the lease's tenant, as settle does. timeoutMs bounds
   * it, by default the client's.
   */
  async release(leaseId: string, signal?: AbortSignal, timeoutMs?: number): Promise<Lease> {
    try {
      return await this.#lease("release", leaseId, signal, timeoutMs);
    } finally {
      this.#memory?.givenBack(leaseId);
    }
  }

  /** #lease posts leaseId to /v1/renew or /v1/release and decodes the answer. */
  async #lease(op: "renew" | "release", leaseId: string, signal: AbortSignal | undefined, timeoutMs: number | undefined): Promise<Lease> {
    const body: LeaseRequest = { lease_id: leaseId };
    const { text, headers } = await this.#ask(op, `${this.#base}/v1/${op}`, body, signal, undefined, timeoutMs);
    const l = parseFields<Lease>(text, op);
    if (typeof l.lease_id !== "string") {
      throw new Error(`tollgate: ${op}: the answer is not a lease (lease_id)`);
    }
    if (op === "renew") {
      noteTimesLeft(l, l.expires_at, undefined, headers.get("Date"), this.#now(), l.ttl_ms);
    }
    return l as Lease;
  }

  /**
   * me returns where apiKey stands now (GET /v1/me): its tenant, plan and
   * every rule of the plan with what it has left, the month's quota and
   * the prepaid credits when the plan has them. The key authenticates the
   * request itself (Authorization: Bearer); the client's service token is
   * not sent. Looking consumes nothing and records no usage.
   *
   * It rejects with a ProblemError when the check API refuses: 401 for a
   * missing or unknown key, 403 for a revoked or expired key or a
   * suspended tenant, 429 past 60 looks a minute per key (`retryAfterMs`
   * says when to look again), 503 while the limiter store does not
   * answer; and otherwise with an Error (`tollgate: me: …`, the transport
   * or decoding error in `cause`), or signal's reason when it aborted. It
   * is bounded by `timeoutMs`, like a check; unlike a check, a failure is
   * never decided by the fail mode.
   */
  async me(apiKey: string, signal?: AbortSignal): Promise<Standing> {
    return parseStanding((await this.#ask("me", this.#meUrl, undefined, signal, apiKey)).text);
  }

  /**
   * #ask sends one call that no fail mode decides (op names it in errors),
   * within timeoutMs (default the client's), and returns the answer's
   * text and headers. It throws a ProblemError for a non-200
   * answer, signal's reason when it aborted, else an Error
   * (`tollgate: op: …`) with the transport error in `cause`.
   */
  async #ask(
    op: string, url: string, body: object | undefined, signal: AbortSignal | undefined, bearer?: string, timeoutMs?: number,
  ): Promise<{ text: string; headers: Headers }> {
    try {
      return await this.#send(url, body, signal, bearer, timeoutMs);
    } catch (err) {
      signal?.throwIfAborted();
      if (err instanceof ProblemError) {
        throw err;
      }
      throw new Error(`tollgate: ${op}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
  }

  /**
   * #post sends one check. It throws a ProblemError for a non-200 answer,
   * a BadAnswer for a 200 that is not a decision, else a transport error.
   */
  async #post(req: CheckRequest): Promise<Decision> {
    const { text, headers } = await this.#send(this.#checkUrl, toWire(req), req.signal);
    const d: Decision = { ...parseDecision(text), headers: pickRateLimitHeaders(headers), remembered: false };
    if (d.lease_id || d.hold_id) {
      noteTimesLeft(d, d.lease_id ? d.lease_expires_at : undefined, d.hold_id ? d.hold_expires_at : undefined, headers.get("Date"), this.#now(),
        d.lease_ttl_ms);
    }
    return d;
  }

  /**
   * #send posts body to url (or, without a body, gets url) with the
   * service token, or the bearer token given, within timeoutMs (default
   * the client's), and
   * returns the text and headers of a 200. It throws a ProblemError for
   * any other status, a BadAnswer for one longer than maxDecisionBody,
   * else a transport error.
   */
  async #send(
    url: string, body: object | undefined, signal: AbortSignal | undefined, bearer = this.#token, timeoutMs = this.#timeoutMs,
  ): Promise<{ text: string; headers: Headers }> {
    const timeout = AbortSignal.timeout(timeoutMs);
    const headers: Record<string, string> = { Authorization: `Bearer ${bearer}`, Accept: "application/json" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
    }
    const resp = await this.#fetch(url, {
      method: body === undefined ? "GET" : "POST",
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      redirect: "manual",
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    if (resp.status !== 200) {
      throw await readProblem(resp);
    }
    const text = await resp.text();
    if (text.length > maxDecisionBody) {
      throw new BadAnswer(`tollgate: the answer is longer than ${maxDecisionBody} characters`);
    }
    return { text, headers: resp.headers };
  }

  /** #fail returns the decision of the fail mode for a check that could not be asked because of err. */
  #fail(err: unknown): Decision {
    const cause = err instanceof Error ? err : new Error(String(err));
    if (this.#failMode === "closed") {
      return {
        allowed: false, reason: Reason.Unavailable, retry_after_ms: 1000, degraded: true, rules: [],
        headers: { "Retry-After": "1" }, remembered: false, cause,
      };
    }
    return { allowed: true, reason: Reason.OK, retry_after_ms: 0, degraded: true, rules: [], headers: {}, remembered: false, cause };
  }
}

/**
 * BadAnswer is the error of an answer read whole that is not what was
 * asked for: for a check, a 200 that is not a decision (not JSON, another
 * shape, too long). It is an answer, not a failure to ask.
 */
class BadAnswer extends Error {
  override readonly name = "BadAnswer";
}

/**
 * unasked reports whether err, an error of a check, means that the check
 * API could not be asked: no answer (a transport error, the timeout) or a
 * ProblemError of an outage (see isOutage). An answer that refuses the
 * check, or a 200 that is not a decision, is not one.
 */
function unasked(err: unknown): boolean {
  if (err instanceof ProblemError) {
    return isOutage(err);
  }
  return !(err instanceof BadAnswer);
}

/**
 * parseBaseUrl checks that s is an absolute http(s) URL without query or
 * fragment and returns it without a trailing slash.
 */
function parseBaseUrl(s: string): string {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    throw new Error(`tollgate: base URL ${JSON.stringify(s)}: want http://host[:port] or https://host[:port]`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new Error(`tollgate: base URL ${JSON.stringify(s)}: want http://host[:port] or https://host[:port]`);
  }
  if (u.search !== "" || u.hash !== "") {
    throw new Error(`tollgate: base URL ${JSON.stringify(s)}: must have no query or fragment`);
  }
  return u.href.replace(/\/+$/, "");
}

/**
 * parseDecision decodes a decision, checking the fields a caller relies
 * on; anything else is a BadAnswer (the check API did not answer it).
 */
function parseDecision(text: string): WireDecision {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new BadAnswer("tollgate: check: the answer is not JSON", { cause: err });
  }
  if (typeof v !== "object" || v === null) {
    throw new BadAnswer("tollgate: check: the answer is not a JSON object");
  }
  const d = v as Partial<WireDecision>;
  if (typeof d.allowed !== "boolean" || typeof d.reason !== "string" || typeof d.retry_after_ms !== "number") {
    throw new BadAnswer("tollgate: check: the answer is not a decision (allowed, reason, retry_after_ms)");
  }
  return { ...d, degraded: d.degraded === true, rules: Array.isArray(d.rules) ? d.rules : [] } as WireDecision;
}

/**
 * parseFields decodes an answer to op (settle, renew, release, me) whose
 * fields the caller checks: a JSON object, or no fields at all when it is
 * another JSON value (null too). An answer that is not JSON is an error.
 */
function parseFields<T>(text: string, op: string): Partial<T> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new Error(`tollgate: ${op}: the answer is not JSON`, { cause: err });
  }
  return (typeof v === "object" && v !== null ? v : {}) as Partial<T>;
}

/** parseSettlement decodes a settlement, checking every field the check API always sends. */
function parseSettlement(text: string): Settlement {
  const s = parseFields<Settlement>(text, "settle");
  if (typeof s.hold_id !== "string" || typeof s.estimate !== "number" || typeof s.cost !== "number" ||
    typeof s.status !== "string" || typeof s.repeated !== "boolean") {
    throw new Error("tollgate: settle: the answer is not a settlement (hold_id, estimate, cost, status, repeated)");
  }
  return s as Settlement;
}

/** parseStanding decodes a standing, checking the fields the check API always sends. */
function parseStanding(text: string): Standing {
  const s = parseFields<Standing>(text, "me");
  if (typeof s.tenant_id !== "string" || typeof s.tenant !== "string" || typeof s.key_id !== "string" ||
    typeof s.plan !== "string" || !Array.isArray(s.rules)) {
    throw new Error("tollgate: me: the answer is not a standing (tenant_id, tenant, key_id, plan, rules)");
  }
  return s as Standing;
}
