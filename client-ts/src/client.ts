import { pickRateLimitHeaders, Reason, toWire, type CheckRequest, type Decision, type WireDecision } from "./decision.js";
import { Denials, denialKey } from "./memory.js";
import { ProblemError, readProblem } from "./problem.js";

/** Defaults of ClientOptions. */
export const defaultTimeoutMs = 500;
export const defaultMemorySize = 10_000;

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
  /** Bounds one check, connecting included, in milliseconds (default 500). Past it, failMode decides. */
  timeoutMs?: number;
  /** Decides when the check API cannot be reached, times out or answers 5xx (default "open"). */
  failMode?: FailMode;
  /** Bounds the denials remembered to answer repeated requests locally (default 10,000); negative turns remembering off. */
  memorySize?: number;
  /** Sends the checks (default the global fetch). */
  fetch?: typeof fetch;
  /** The clock of remembered denials, in milliseconds since the epoch (default Date.now). */
  now?: () => number;
}

/** maxDecisionBody bounds the decision read, in characters; real ones are a few hundred per rule. */
const maxDecisionBody = 1 << 20;

/**
 * TollgateClient is a client of the check API. Create one per process and
 * share it: it holds the remembered denials, and the global fetch reuses
 * connections.
 */
export class TollgateClient {
  readonly #checkUrl: string;
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
    this.#checkUrl = parseBaseUrl(opts.baseUrl) + "/v1/check";
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

  /**
   * check asks whether req may proceed now. Every answer of the server is
   * a Decision, and so is an outage (unreachable, timed out, 5xx, or an
   * answer that is not a decision): the fail mode decides it, with
   * `degraded` set and the reason in `cause`.
   *
   * It rejects only with a ProblemError when the server refused the check
   * — 400, 401 (a bad service token), 413 or 422 (invalid values; `errors`
   * names them) — or with req.signal's reason when the signal aborted.
   *
   * A request denied earlier with a positive retry_after_ms is denied
   * again without a round trip until that wait has passed (`remembered`).
   */
  async check(req: CheckRequest): Promise<Decision> {
    const key = this.#memory === undefined ? "" : denialKey(req);
    const known = this.#memory?.lookup(key, this.#now());
    if (known !== undefined) {
      return known;
    }
    const askedAt = this.#now();
    let d: Decision;
    try {
      d = await this.#post(req);
    } catch (err) {
      req.signal?.throwIfAborted();
      if (err instanceof ProblemError && err.status < 500) {
        throw err;
      }
      return this.#fail(err);
    }
    if (this.#memory !== undefined && !d.allowed && d.retry_after_ms > 0) {
      this.#memory.remember(key, d, askedAt);
    }
    return d;
  }

  /** #post sends one check. It throws a ProblemError for a non-200 answer, else a transport or decoding error. */
  async #post(req: CheckRequest): Promise<Decision> {
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
    const resp = await this.#fetch(this.#checkUrl, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${this.#token}`,
        "Content-Type": "application/json",
        Accept: "application/json",
      },
      body: JSON.stringify(toWire(req)),
      redirect: "manual",
      signal,
    });
    if (resp.status !== 200) {
      throw await readProblem(resp);
    }
    const text = await resp.text();
    if (text.length > maxDecisionBody) {
      throw new Error(`tollgate: check: the decision is longer than ${maxDecisionBody} characters`);
    }
    return { ...parseDecision(text), headers: pickRateLimitHeaders(resp.headers), remembered: false };
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
 * on; anything else is an error (the check API did not answer it).
 */
function parseDecision(text: string): WireDecision {
  const v: unknown = JSON.parse(text);
  if (typeof v !== "object" || v === null) {
    throw new Error("tollgate: check: the answer is not a JSON object");
  }
  const d = v as Partial<WireDecision>;
  if (typeof d.allowed !== "boolean" || typeof d.reason !== "string" || typeof d.retry_after_ms !== "number") {
    throw new Error("tollgate: check: the answer is not a decision (allowed, reason, retry_after_ms)");
  }
  return { ...d, degraded: d.degraded === true, rules: Array.isArray(d.rules) ? d.rules : [] } as WireDecision;
}
