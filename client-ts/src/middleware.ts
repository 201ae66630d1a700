import { STATUS_CODES, type IncomingMessage, type ServerResponse } from "node:http";
import type { TollgateClient } from "./client.js";
import { effectiveCost, Reason, type CheckRequest, type Decision } from "./decision.js";
import { ceilDiv } from "./memory.js";
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
   * `cost` is then an estimate, and when the response has finished (or
   * closed) the middleware settles the hold at the cost the handler
   * reported with reportCost or in a Tollgate-Cost response header (set
   * with res.setHeader or given to res.writeHead; removed from the
   * response), else at the estimate. Default (absent): a request is held
   * when a rule that matches it asks for holds (its option hold;
   * CheckRequest.autoHold), as the Go SDK's middleware does.
   */
  hold?: boolean | ((req: Req) => boolean | Promise<boolean>);
  /**
   * The outcomes of a held request settled at 0: "5xx" (a response status
   * of 500 or more, whatever the handler reported) and "timeout" (the
   * service did not deliver: the response closed unfinished before any
   * of its body was written, and the handler reported no cost). A caller
   * that hangs up after some of the body was written is not a timeout:
   * it controls its own disconnection, so its request is settled at the
   * cost reported, else at the estimate. The outcomes the hold's rules
   * list (their option refund_on, the decision's `hold_refund_on`) are
   * added to these. Default: none.
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

/** costReports holds the cost each held request's handler reported, undefined until it reports one. */
const costReports = new WeakMap<object, { cost?: number }>();

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
 * released once its response has closed, and a held one is settled then
 * (see `hold`), which releases its lease too; a denial takes no lease. A
 * caller that goes away during the delay is not served: its hold is
 * settled at 0, or its lease released, at once.
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
    if (holdId === "" && leaseId !== "") {
      releaseWhenDone(client, res, leaseId); // settling a hold releases its lease
    }
    if (d.delay_ms !== undefined && d.delay_ms > 0 && !(await wait(res, d.delay_ms))) {
      // The caller went away while held: nothing was served, so the hold
      // gives everything back (and its lease); a lease alone was released
      // when the response closed.
      if (holdId !== "") {
        client.settle(holdId, 0).catch(() => undefined);
      }
      return;
    }
    // A handler may report a cost in costHeader whether or not the
    // request holds anything: it never reaches the caller.
    const report = takeCostHeader(res);
    if (holdId !== "") {
      const refundOn = [...(opts.refundOn ?? []), ...(d.hold_refund_on ?? [])];
      settleWhenDone(client, req, res, holdId, effectiveCost(check), refundOn, report, watchBody(res));
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
 * reportCost sets the actual cost of the held request req; the middleware
 * settles the hold at it when the response finishes. It returns false
 * when req holds nothing (not held, skipped, or not checked).
 */
export function reportCost(req: object, cost: number): boolean {
  const report = costReports.get(req);
  if (report !== undefined) {
    report.cost = cost;
  }
  return report !== undefined;
}

/**
 * settleWhenDone settles the hold holdId of req once res has closed: at
 * the cost reported (into report), else the estimate; at 0 for the
 * outcomes refundOn lists (see MiddlewareOptions.refundOn), served
 * telling whether any of the body was written. A failed settlement is
 * dropped: the hold then expires by its TTL.
 */
function settleWhenDone(
  client: TollgateClient, req: object, res: ServerResponse, holdId: string, estimate: number, refundOn: readonly RefundOutcome[],
  report: { cost?: number }, served: () => boolean,
): void {
  costReports.set(req, report);
  const settle = () => {
    const reported = report.cost !== undefined;
    const cost = report.cost ?? estimate;
    // A timeout is the service not delivering, never a caller that read
    // its answer and hung up before the response finished.
    const timedOut = !res.writableFinished && !served() && !reported;
    const refunded = (res.statusCode >= 500 && refundOn.includes("5xx")) || (timedOut && refundOn.includes("timeout"));
    client.settle(holdId, refunded ? 0 : cost).catch(() => undefined);
  };
  if (res.closed) {
    settle(); // the caller went away during the check
    return;
  }
  res.once("close", settle);
}

/**
 * releaseWhenDone releases the lease leaseId once res has closed: after
 * the last byte of the response, or when the caller went away (during the
 * check or a shaping delay too), so that its slots of concurrency rules
 * are free for the next request rather than taken until the lease's TTL.
 * A failed release is dropped: the lease then expires by its TTL.
 */
function releaseWhenDone(client: TollgateClient, res: ServerResponse, leaseId: string): void {
  const release = () => {
    client.release(leaseId).catch(() => undefined);
  };
  if (res.closed) {
    release(); // the caller went away during the check
    return;
  }
  res.once("close", release);
}

/**
 * takeCostHeader makes res remove costHeader just before its headers are
 * sent, from those set with setHeader and from writeHead's own (which win,
 * as writeHead makes them), recording the cost it reports into the report
 * it returns.
 */
function takeCostHeader(res: ServerResponse): { cost?: number } {
  const report: { cost?: number } = {};
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
    if (v !== undefined && /^[0-9]+$/.test(String(v)) && Number.isSafeInteger(Number(v))) {
      report.cost = Number(v);
    }
    return writeHead.apply(this, args as Parameters<ServerResponse["writeHead"]>);
  } as ServerResponse["writeHead"];
  return report;
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
 * caller is still there; the function it returns says whether any was.
 */
function watchBody(res: ServerResponse): () => boolean {
  let served = false;
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
    note(args[0]);
    return end.apply(this, args as Parameters<ServerResponse["end"]>);
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
