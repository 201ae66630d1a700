import { STATUS_CODES, type IncomingMessage, type ServerResponse } from "node:http";
import type { TollgateClient } from "./client.js";
import { checkCost, effectiveCost, Reason, timesLeftOf, type CheckRequest, type Decision } from "./decision.js";
import { ceilDiv } from "./memory.js";
import { isOutage, ProblemError } from "./problem.js";
import { requestResource, type ExpressLike } from "./resource.js";

/** Next is Connect's and Express's `next`: called with nothing to go on, with an error to fail. */
export type Next = (err?: unknown) => void;

/** Middleware has Connect's signature, which Express and plain node:http handlers can call. */
export type Middleware<Req, Res> = (req: Req, res: Res, next: Next) => void;

/**
 * MiddlewareOptions configures the middleware. Every field is optional;
 * each callback may return a promise.
 *
 * Req and Res are the types the callbacks see. Used as `app.use(…)`'s
 * argument they are Express's; on a route (`app.post(path,
 * middleware(…), handler)`) TypeScript cannot infer them, so name them:
 * `middleware<express.Request, express.Response>(client, { … })`.
 */
export interface MiddlewareOptions<Req extends IncomingMessage = IncomingMessage, Res extends ServerResponse = ServerResponse> {
  /**
   * Returns the caller's API key, "" or undefined for an anonymous
   * caller. Default: apiKey — the token of "Authorization: Bearer <key>",
   * else the X-API-Key header.
   */
  keyGenerator?: (req: Req) => string | undefined | Promise<string | undefined>;
  /**
   * Returns the caller's address. Default: remoteAddress — Express's
   * `req.ip` when present (it follows the app's "trust proxy" setting),
   * else the socket's peer. No header is trusted otherwise.
   */
  ip?: (req: Req) => string | undefined | Promise<string | undefined>;
  /** Returns what is accessed, matched against the rules' resource patterns. Default: requestResource. */
  resource?: (req: Req) => string | Promise<string>;
  /**
   * Whether the default resource tells paths apart by case. Default: as
   * the framework routes — with Express, its "case sensitive routing"
   * setting (off unless the app sets it: "/V1/Search" reaches the handler
   * of "/v1/search", so its path is folded to lower case before the
   * check, and the rules' resource patterns must be lower case); without
   * Express, true. Set it when a router routes otherwise than its app
   * (`express.Router({ caseSensitive: true })`). A `resource` callback is
   * used as it returns.
   */
  caseSensitive?: boolean;
  /** Returns the units the request consumes (0 means 1). Default 1. With a hold, the estimate. */
  cost?: (req: Req) => number | Promise<number>;
  /**
   * Checks requests with a hold (for rules priced in tokens, say): true
   * for every request, false for none, or a function that says which.
   * `cost` is then an estimate, and when the handler is done — it ended
   * the response (res.end, which Express's res.send and res.json call),
   * or, the caller gone, it reported a cost — the middleware settles the
   * hold at the cost the handler reported with reportCost or in a
   * Tollgate-Cost response header (set with res.setHeader or given to
   * res.writeHead; removed from the response), else at the estimate. A
   * caller that goes away does not end the handler's work, so it settles
   * nothing by itself; should the handler then never end the response
   * nor report a cost, the hold is settled shortly before it would
   * expire, as if the handler had ended it then. Default
   * (absent): a request is held when a rule that matches it asks for
   * holds (its option hold; CheckRequest.autoHold), as the Go SDK's
   * middleware does.
   */
  hold?: boolean | ((req: Req) => boolean | Promise<boolean>);
  /**
   * The outcomes of a held request settled at 0: "5xx" (a response status
   * of 500 or more, whatever the handler reported) and "timeout" (the
   * service did not deliver: the caller was gone before the handler
   * ended the response and before any of its body was written, and the
   * handler reported no cost; settled when the handler ends the
   * response). A handler that goes on and reports what its work cost is
   * charged that: only unreported work is refunded. A caller that hangs
   * up after some of the body was written is not a timeout: it controls
   * its own disconnection, so its request is settled at the cost
   * reported, else at the estimate. The outcomes the hold's rules list
   * (their option refund_on, the decision's `hold_refund_on`) are added
   * to these. Default: none.
   */
  refundOn?: readonly RefundOutcome[];
  /** Returns true for requests that are not checked at all (e.g. health probes). */
  skip?: (req: Req) => boolean | Promise<boolean>;
  /**
   * Answers a denied request, whatever the reason (decision.reason says
   * which). The rate-limit headers are already set. Delegate to
   * writeDenied for the reasons you do not customise. Default:
   * writeDenied.
   */
  onLimitReached?: (req: Req, res: Res, decision: Decision) => void | Promise<void>;
  /**
   * Answers a request whose check failed with an error: the check API
   * refused the check (a ProblemError: a bad service token, an address
   * it cannot parse), something in between refused it (a ProblemError: a
   * WAF's 403, say), the answer was not a decision, or one of the
   * callbacks above threw. Outages are not errors: the client's fail
   * mode decides them. Default: a 500 application/problem+json, nothing
   * when the response has already started. With Express, `(req, res,
   * err, next) => next(err)` hands it to the app's error handler.
   */
  onError?: (req: Req, res: Res, err: unknown, next: Next) => void;
}

/** RefundOutcome is an outcome of a held request that refundOn may list. */
export type RefundOutcome = "5xx" | "timeout";

/**
 * costHeader is the response header in which a handler behind the
 * middleware may report a held request's actual cost (reportCost does the
 * same from code), with res.setHeader or in res.writeHead's headers; the
 * middleware removes it before the headers are sent, from every response
 * it lets through, held or not.
 */
export const costHeader = "Tollgate-Cost";

const decisions = new WeakMap<object, Decision>();

/** costReports holds the cost report of each held request until its hold is settled. */
const costReports = new WeakMap<object, CostReport>();

/**
 * CostReport is the cost a held request's handler reported, undefined
 * until it reports one; onReport, when set, settles the hold at once
 * (the caller is gone, and the handler says what its work cost).
 */
interface CostReport {
  cost?: number;
  onReport?: () => void;
}

/** decisionOf returns the decision the middleware made for req, if it checked it. */
export function decisionOf(req: object): Decision | undefined {
  return decisions.get(req);
}

/**
 * middleware returns Connect/Express middleware that checks every request
 * with client before the next handler runs. It copies the decision's
 * rate-limit headers to the response (allowed or not), remembers the
 * decision for decisionOf, holds the request for the decision's delay if
 * a shaping rule asks for one, and answers denials with onLimitReached.
 * An admitted request that took a lease on concurrency rules has it
 * renewed while the handler runs and released when the handler ends the
 * response, and a held one is settled then (see `hold`), which releases
 * its lease too; a denial takes no lease. After the caller goes away the
 * lease is no longer renewed: it is released when the handler ends the
 * response, else expires by its TTL. A caller that goes away during the
 * check or the delay is not served (next is not called): its hold is
 * settled at 0, or its lease released, at once. The response ends once
 * the first attempt of its settlement or release is answered (one round
 * trip, bounded by four times the client's timeoutMs), so that a caller
 * who waits for its response and sends its next request finds its slot
 * free and its refund made; a caller already gone is not waited for. An
 * attempt the check API could not answer is retried a few times in the
 * background, after the response has ended.
 *
 *     app.use(middleware(tollgate, { skip: (req) => req.path === "/healthz" }));
 *     app.post("/v1/complete", middleware<express.Request, express.Response>(tollgate, { cost: (req) => req.body.max_tokens }), complete);
 */
export function middleware<Req extends IncomingMessage = IncomingMessage & ExpressLike, Res extends ServerResponse = ServerResponse>(
  client: TollgateClient,
  opts: MiddlewareOptions<Req, Res> = {},
): Middleware<Req, Res> {
  const onLimitReached = opts.onLimitReached ?? writeDenied;
  const onError = opts.onError ?? writeCheckError;
  const guard = async (req: Req, res: Res, next: Next): Promise<void> => {
    if (opts.skip !== undefined && (await opts.skip(req))) {
      next();
      return;
    }
    const check = await checkRequest(req, opts);
    const d = await client.check(check);
    const arrived = performance.now();
    for (const [name, value] of Object.entries(d.headers)) {
      res.setHeader(name, value);
    }
    decisions.set(req, d);
    if (!d.allowed) {
      await onLimitReached(req, res, d);
      return;
    }
    const holdId = d.hold_id ?? "";
    const leaseId = d.lease_id ?? "";
    const stopRenewing = keepLease(client, leaseId, timesLeftOf(d).lease);
    const delayed = d.delay_ms !== undefined && d.delay_ms > 0;
    if ((delayed && !(await wait(res, d.delay_ms ?? 0))) || gone(res)) {
      // The caller went away during the check or the delay: nothing was
      // served, so the hold gives everything back (and its lease), or
      // the lease is released.
      stopRenewing();
      if (holdId !== "") {
        void giveBack(client, (timeoutMs) => client.settle(holdId, 0, undefined, timeoutMs));
      } else if (leaseId !== "") {
        void giveBack(client, (timeoutMs) => client.release(leaseId, undefined, timeoutMs));
      }
      return;
    }
    // A handler may report a cost in costHeader whether or not the
    // request holds anything: it never reaches the caller.
    const report = takeCostHeader(res);
    if (holdId !== "" || leaseId !== "") {
      const refundOn = [...(opts.refundOn ?? []), ...(d.hold_refund_on ?? [])];
      giveBackWhenDone(client, req, res, d, arrived, effectiveCost(check), refundOn, report, stopRenewing);
    }
    next();
  };
  return (req, res, next) => {
    guard(req, res, next).catch((err: unknown) => onError(req, res, err, next));
  };
}

/** checkRequest builds the check of req from the options, or their defaults. */
async function checkRequest<Req extends IncomingMessage>(req: Req, opts: MiddlewareOptions<Req, never>): Promise<CheckRequest> {
  const key = opts.keyGenerator ? await opts.keyGenerator(req) : apiKey(req);
  const ip = opts.ip ? await opts.ip(req) : remoteAddress(req);
  const resource = opts.resource ? await opts.resource(req) : requestResource(req, { caseSensitive: opts.caseSensitive });
  const check: CheckRequest = { resource };
  if (key) check.key = key;
  if (ip) check.ip = ip;
  if (opts.cost) check.cost = await opts.cost(req);
  if (opts.hold === undefined) {
    check.autoHold = true; // the rules say
  } else if (typeof opts.hold === "function" ? await opts.hold(req) : opts.hold) {
    check.hold = true;
  }
  return check;
}

/**
 * reportCost sets the actual cost of the held request req, a safe integer
 * ≥ 0; the middleware settles the hold at it when the handler ends the
 * response, or at once when the caller has already gone (then the first
 * cost reported is final). It returns false when req holds nothing (not
 * held, skipped, or not checked) or its hold is already settled. It
 * throws a TypeError for any other cost (a fraction, NaN, Infinity, a
 * negative): the check API takes whole units only.
 */
export function reportCost(req: object, cost: number): boolean {
  checkCost("reportCost", cost);
  const report = costReports.get(req);
  if (report === undefined) {
    return false;
  }
  report.cost = cost;
  report.onReport?.();
  return true;
}

/** gone reports whether the response has closed: its caller went away, or it was destroyed. */
function gone(res: ServerResponse): boolean {
  return res.closed || res.destroyed;
}

/**
 * giveBackWhenDone settles the hold of d, or releases its lease, when the
 * handler is done with req: when it ends res (calls res.end), or, once
 * the caller is gone, when it reports a cost (reportCost); Node fires no
 * 'finish' for a response ended after its caller went away, and 'close'
 * fires as the caller goes, while the handler still runs. The hold is
 * settled at the cost reported (into report), else the estimate; at 0
 * for the outcomes refundOn lists (see MiddlewareOptions.refundOn). A
 * handler that never ends the response after its caller went away has
 * the hold settled shortly before it would expire (at nine tenths of its
 * remaining life, counted from arrived, when the decision arrived on the
 * monotonic clock), its lease left to expire by its TTL. stopRenewing is
 * called when the handler is done or the response closes, whichever is
 * first. When the handler ends the response of a caller still there,
 * the original res.end is called once the first attempt of the
 * settlement or release is answered (see watchBody).
 */
function giveBackWhenDone(
  client: TollgateClient, req: object, res: ServerResponse, d: Decision, arrived: number, estimate: number, refundOn: readonly RefundOutcome[],
  report: CostReport, stopRenewing: () => void,
): void {
  const holdId = d.hold_id ?? "";
  const leaseId = d.lease_id ?? "";
  let done = false;
  let backstop: NodeJS.Timeout | undefined;
  const finish = (callerGone: boolean, served: boolean): Promise<void> | undefined => {
    if (done) {
      return undefined;
    }
    done = true;
    clearTimeout(backstop);
    stopRenewing();
    if (holdId === "") {
      return giveBack(client, (timeoutMs) => client.release(leaseId, undefined, timeoutMs));
    }
    costReports.delete(req);
    const reported = report.cost !== undefined;
    const cost = report.cost ?? estimate;
    // A timeout is the caller gone before anything was served, and the
    // handler reporting no cost for what it did meanwhile; never a caller
    // that read some of its answer and hung up.
    const timedOut = callerGone && !served && !reported;
    const refunded = (res.statusCode >= 500 && refundOn.includes("5xx")) || (timedOut && refundOn.includes("timeout"));
    return giveBack(client, (timeoutMs) => client.settle(holdId, refunded ? 0 : cost, undefined, timeoutMs));
  };
  const served = watchBody(res, report, (callerGone) => finish(callerGone, served()));
  if (holdId !== "") {
    report.onReport = () => {
      if (gone(res)) {
        void finish(true, served());
      }
    };
    costReports.set(req, report);
  }
  const holdLeft = timesLeftOf(d).hold;
  const holdExpires = holdLeft === undefined ? undefined : arrived + holdLeft;
  res.once("close", () => {
    stopRenewing();
    if (done || holdExpires === undefined) {
      return;
    }
    // The caller is gone and the handler still runs. Should it never end
    // the response (a pipe stops at the disconnection, say), the hold is
    // settled shortly before it would expire, at what the handler has
    // reported by then, else the estimate: a caller that hangs up is
    // charged, not refunded by the hold's expiry.
    const left = holdExpires - performance.now();
    if (left > 0) {
      backstop = setTimeout(() => void finish(true, served()), Math.floor(left * 0.9));
      backstop.unref();
    }
  });
}

/** minRenewalMs is the shortest wait between two renewals of a lease, as the Go SDK's minRenewal. */
const minRenewalMs = 50;

/**
 * keepLease renews the lease leaseId in the background, a third of its
 * remaining life before each expiry, until the function it returns is
 * called, as the Go SDK's middleware does. The remaining life is counted
 * from when each answer arrived (leaseLeftMs: its expiry less its Date,
 * both by the server's clock), on the monotonic clock,
 * so that a local clock that disagrees with the server's neither lets the
 * lease lapse nor renews it needlessly. It stops by itself once the lease
 * is gone (404) or surely expired; a renewal that fails otherwise is
 * tried again at the next turn.
 */
function keepLease(client: TollgateClient, leaseId: string, leftMs: number | undefined): () => void {
  if (leaseId === "" || leftMs === undefined) {
    return () => undefined;
  }
  let expires = performance.now() + leftMs;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const turn = () => {
    const left = expires - performance.now();
    if (stopped || left <= 0) {
      return;
    }
    timer = setTimeout(renew, Math.max(Math.floor(left / 3), minRenewalMs));
    timer.unref();
  };
  const renew = async () => {
    try {
      const left = timesLeftOf(await client.renew(leaseId)).lease;
      if (left !== undefined) {
        expires = performance.now() + left;
      }
    } catch (err) {
      if (err instanceof ProblemError && err.status === 404) {
        return; // released, or expired: its slot may be someone else's
      }
    }
    turn();
  };
  turn();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** giveBackAttempts bounds the tries of one settlement or release. */
const giveBackAttempts = 4;

/** giveBackBackoffMs is the wait before the first retry of a settlement or release; each next one waits three times as long. */
const giveBackBackoffMs = 100;

/**
 * giveBack runs send, a settlement or release, each attempt bound by
 * four times the client's check timeout, and retries it, the same call
 * again, up to giveBackAttempts in all, when the check API could not
 * answer it: a transport error or timeout, a 5xx (503: the limiter store
 * did not answer), a 408 or 429. Repeating a settlement at the same cost,
 * or a release, is harmless: the server answers it as repeated. A
 * refusal (404, 409, 422) is not retried. What still fails is dropped:
 * the hold or lease then expires by its TTL. The promise it returns
 * resolves, never rejects, once the first attempt is answered (or has
 * failed); the retries go on in the background.
 */
function giveBack(client: TollgateClient, send: (timeoutMs: number) => Promise<unknown>): Promise<void> {
  const timeoutMs = 4 * client.timeoutMs;
  let attempt = 0;
  const run = async (): Promise<void> => {
    attempt++;
    try {
      await send(timeoutMs);
    } catch (err) {
      if (attempt >= giveBackAttempts || !retryable(err)) {
        return;
      }
      const backoff = giveBackBackoffMs * 3 ** (attempt - 1);
      // Jittered, so that the settlements of one outage do not all come back at once.
      setTimeout(() => void run(), Math.floor(backoff / 2 + Math.random() * backoff)).unref();
    }
  };
  return run();
}

/**
 * retryable reports whether err, of a settlement or release, means the
 * check API could not answer it (see isOutage), not that it refused it.
 * A TypeError is the call's own mistake; any other error is the
 * transport's or an answer that could not be read.
 */
function retryable(err: unknown): boolean {
  if (err instanceof ProblemError) {
    return isOutage(err);
  }
  return !(err instanceof TypeError);
}

/**
 * takeCostHeader makes res remove costHeader just before its headers are
 * sent, from those set with setHeader and from writeHead's own (which win,
 * as writeHead makes them), recording the cost it reports into the report
 * it returns.
 */
function takeCostHeader(res: ServerResponse): CostReport {
  const report: CostReport = {};
  const writeHead = res.writeHead;
  res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    let v: unknown = res.getHeader(costHeader);
    if (v !== undefined) {
      res.removeHeader(costHeader);
    }
    // writeHead(status, [statusMessage], [headers])
    const at = typeof args[1] === "string" ? 2 : 1;
    const given = withoutCost(args[at]);
    if (given !== undefined) {
      args[at] = given.headers;
      v = given.value;
    }
    report.cost = headerCost(v) ?? report.cost;
    return writeHead.apply(this, args as Parameters<ServerResponse["writeHead"]>);
  } as ServerResponse["writeHead"];
  return report;
}

/** headerCost returns the cost a costHeader value v reports: a whole number of units, else undefined. */
function headerCost(v: unknown): number | undefined {
  return v !== undefined && /^[0-9]+$/.test(String(v)) && Number.isSafeInteger(Number(v)) ? Number(v) : undefined;
}

/** isCostHeader reports whether name is costHeader, in any case. */
function isCostHeader(name: unknown): boolean {
  return typeof name === "string" && name.toLowerCase() === "tollgate-cost";
}

/**
 * withoutCost returns writeHead's headers argument — an object, a flat
 * list of names and values, or a list of [name, value] pairs — without
 * costHeader, in the same form, and the value it had there (the last, as
 * writeHead keeps it); undefined when it has none. The handler's object or
 * list is left as it is: it may serve other responses too.
 */
function withoutCost(headers: unknown): { headers: unknown; value: unknown } | undefined {
  if (typeof headers !== "object" || headers === null) {
    return undefined;
  }
  const pairs = Array.isArray(headers) && Array.isArray(headers[0]);
  const entries: [unknown, unknown][] = !Array.isArray(headers) ? Object.entries(headers)
    : pairs ? (headers as [unknown, unknown][])
    : Array.from({ length: Math.ceil(headers.length / 2) }, (_, i) => [headers[2 * i], headers[2 * i + 1]]);
  const cost = entries.filter(([name]) => isCostHeader(name));
  if (cost.length === 0) {
    return undefined;
  }
  const kept = entries.filter(([name]) => !isCostHeader(name));
  return { headers: !Array.isArray(headers) ? Object.fromEntries(kept) : pairs ? kept : kept.flat(), value: cost[cost.length - 1]?.[1] };
}

/**
 * watchBody makes res note when some of its body is written while its
 * caller is still there, and call ended once when the handler ends it
 * (res.end), telling whether the caller was gone by then; the function it
 * returns says whether any body was served. A cost set with res.setHeader
 * and not yet sent is taken into report before ended is called. When
 * ended returns a promise (the first attempt of a give-back) and the
 * caller is still there, the response is ended once it resolves, or at
 * once should the caller go meanwhile: a caller that waits for its
 * response and sends its next request at once must find its slot free
 * and its refund made. A further res.end meanwhile is ignored.
 */
function watchBody(res: ServerResponse, report: CostReport, ended: (callerGone: boolean) => Promise<void> | undefined): () => boolean {
  let served = false;
  let ending = false;
  let waiting = false;
  const note = (chunk: unknown) => {
    if (!served && !res.destroyed && (typeof chunk === "string" || chunk instanceof Uint8Array) && chunk.length > 0) {
      served = true;
    }
  };
  const write = res.write;
  res.write = function (this: ServerResponse, ...args: unknown[]) {
    note(args[0]);
    return write.apply(this, args as Parameters<ServerResponse["write"]>);
  } as ServerResponse["write"];
  const end = res.end;
  res.end = function (this: ServerResponse, ...args: unknown[]) {
    if (waiting) {
      return this; // the response already ends once its give-back is answered
    }
    if (ending) {
      return end.apply(this, args as Parameters<ServerResponse["end"]>);
    }
    ending = true;
    note(typeof args[0] === "function" ? undefined : args[0]);
    const callerGone = gone(res);
    if (!res.headersSent) {
      // Sent (and removed) with the headers only once end is called.
      report.cost = headerCost(res.getHeader(costHeader)) ?? report.cost;
    }
    const first = ended(callerGone);
    if (first === undefined || callerGone) {
      return end.apply(this, args as Parameters<ServerResponse["end"]>);
    }
    waiting = true;
    const endNow = () => {
      if (waiting) {
        waiting = false;
        res.off("close", endNow);
        end.apply(this, args as Parameters<ServerResponse["end"]>);
      }
    };
    res.once("close", endNow);
    void first.then(endNow);
    return this;
  } as ServerResponse["end"];
  return () => served;
}

/** wait waits ms milliseconds, or until the response closes (then it resolves false, at once if it has already). */
function wait(res: ServerResponse, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    if (res.closed) {
      resolve(false);
      return;
    }
    const closed = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      res.off("close", closed);
      resolve(true);
    }, ms);
    res.once("close", closed);
  });
}

/**
 * apiKey returns the API key of req: the token of "Authorization: Bearer
 * <key>" (any case of "Bearer"), else the X-API-Key header, else "". It
 * is the middleware's default keyGenerator, the same headers the Go SDK's
 * middleware reads.
 */
export function apiKey(req: IncomingMessage): string {
  const auth = req.headers.authorization ?? "";
  const space = auth.indexOf(" ");
  if (space > 0 && auth.slice(0, space).toLowerCase() === "bearer") {
    const token = auth.slice(space + 1).trim();
    if (token !== "") {
      return token;
    }
  }
  const header = req.headers["x-api-key"];
  return (Array.isArray(header) ? header[0] ?? "" : header ?? "").trim();
}

/**
 * remoteAddress returns the caller's address: Express's `req.ip` when it
 * is set, else the socket's peer address. It is the middleware's default
 * `ip`.
 */
export function remoteAddress(req: IncomingMessage & ExpressLike): string | undefined {
  return req.ip || req.socket?.remoteAddress;
}

/**
 * writeDenied answers a denied request with application/problem+json
 * whose code is the decision's reason: 429 for rate_limited and
 * spend_cap, 402 for credits_exhausted, 401 for invalid_key and
 * key_required (with WWW-Authenticate), 403 for key_revoked, key_expired
 * and tenant_suspended, 503 for unavailable; an unknown reason is a 429
 * when it has a wait, a 403 otherwise. It is the middleware's default
 * onLimitReached, and answers as the Go SDK's middleware does.
 */
export function writeDenied(_req: IncomingMessage, res: ServerResponse, d: Decision): void {
  let status = 403;
  let detail = "the request is not allowed";
  switch (d.reason) {
    case Reason.SpendCap:
      status = 429;
      detail = "the monthly spend cap is reached";
      break;
    case Reason.CreditsExhausted:
      status = 402;
      detail = "the prepaid credits are exhausted";
      break;
    case Reason.RateLimited:
      status = 429;
      detail = d.retry_after_ms < 0 ? "the request exceeds what the rate limit can ever allow" : "rate limit exceeded";
      break;
    case Reason.InvalidKey:
      status = 401;
      detail = "the API key is not valid";
      res.setHeader("WWW-Authenticate", 'Bearer error="invalid_token"');
      break;
    case Reason.KeyRequired:
      status = 401;
      detail = "an API key is required";
      res.setHeader("WWW-Authenticate", "Bearer");
      break;
    case Reason.KeyRevoked:
      detail = "the API key has been revoked";
      break;
    case Reason.KeyExpired:
      detail = "the API key has expired";
      break;
    case Reason.TenantSuspended:
      detail = "the account is suspended";
      break;
    case Reason.Unavailable:
      status = 503;
      detail = "rate limiting is unavailable";
      break;
    default:
      if (d.retry_after_ms > 0) {
        status = 429;
      }
  }
  if (d.retry_after_ms > 0) {
    if (!res.hasHeader("Retry-After")) {
      res.setHeader("Retry-After", String(ceilDiv(d.retry_after_ms, 1000)));
    }
    detail += `; retry after ${String(res.getHeader("Retry-After"))} s`;
  }
  writeProblem(res, status, d.reason, detail);
}

/** writeCheckError is the default onError. */
function writeCheckError(_req: IncomingMessage, res: ServerResponse): void {
  if (res.headersSent || res.destroyed) {
    return; // the answer has started, or nobody reads it
  }
  writeProblem(res, 500, "internal", "the rate limit check failed");
}

/** writeProblem answers with an application/problem+json body. */
function writeProblem(res: ServerResponse, status: number, code: string, detail: string): void {
  res.statusCode = status;
  res.setHeader("Content-Type", "application/problem+json");
  res.setHeader("Cache-Control", "no-store");
  const body = { type: "about:blank", title: STATUS_CODES[status] ?? "", status, detail, code };
  res.end(JSON.stringify(body) + "\n");
}
