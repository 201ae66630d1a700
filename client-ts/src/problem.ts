import { STATUS_CODES } from "node:http";
import type { components } from "./openapi.js";

/** Problem is an RFC 9457 application/problem+json body as Tollgate sends it. */
export type Problem = components["schemas"]["Problem"];

/** maxProblemBody bounds how much of an error answer is read, in characters. */
const maxProblemBody = 64 << 10;

/**
 * ProblemError is an error answer of a Tollgate server: its problem+json
 * body, or the status alone when the body was not one (then `detail`
 * holds the start of the body, so that an answer from a proxy in between
 * still says something). Test for it with `instanceof ProblemError`.
 */
export class ProblemError extends Error {
  override readonly name = "ProblemError";
  /** The HTTP status of the answer. */
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  /**
   * Tollgate's error code: invalid, malformed, not_found, conflict,
   * unauthorized, forbidden, too_large, rate_limited, internal,
   * method_not_allowed, unavailable; "" when the body was not a problem.
   */
  readonly code: string;
  /** Each invalid field and what is wrong with it, e.g. `ip` → "must be an IPv4 or IPv6 address". */
  readonly errors: Readonly<Record<string, string>>;
  /** The answer's Retry-After in milliseconds, 0 when it had none. */
  readonly retryAfterMs: number;

  constructor(status: number, body: Partial<Problem>, retryAfterMs = 0) {
    super(describe(status, body));
    this.status = status;
    this.type = body.type ?? "about:blank";
    this.title = body.title ?? STATUS_CODES[status] ?? "";
    this.detail = body.detail ?? "";
    this.code = body.code ?? "";
    this.errors = body.errors ?? {};
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * describe returns the message of a problem, naming the invalid fields in
 * order, e.g. "422 invalid: the request has invalid fields: ip must be an
 * IPv4 or IPv6 address".
 */
function describe(status: number, body: Partial<Problem>): string {
  let s = `${status} ${body.code || STATUS_CODES[status] || ""}`.trimEnd();
  if (body.detail) {
    s += `: ${body.detail}`;
  }
  const fields = Object.keys(body.errors ?? {}).sort();
  if (fields.length > 0) {
    s += ": " + fields.map((f) => `${f} ${body.errors?.[f] ?? ""}`).join(", ");
  }
  return s;
}

/**
 * isOutage reports whether err means that the check API could not be
 * asked: a 5xx, or a 408 or 429, which only something in between sends
 * (the check API never answers a check with either). Every other status
 * is an answer not to let a request through on: the check API's refusal
 * (400, 401, 413, 422), or something in between refusing the check for
 * it — a WAF's 403 on a body with a key that looks like an attack, a 404
 * or 405 of a route that is not the check API's. A fail mode "open" on
 * those would let whoever provokes them past every limit.
 */
export function isOutage(err: ProblemError): boolean {
  return err.status >= 500 || err.status === 408 || err.status === 429;
}

/** readProblem turns a non-2xx answer into a ProblemError. */
export async function readProblem(resp: Response): Promise<ProblemError> {
  const seconds = Number.parseInt(resp.headers.get("Retry-After") ?? "", 10);
  const retryAfterMs = seconds > 0 ? seconds * 1000 : 0;
  const raw = (await resp.text()).slice(0, maxProblemBody);
  const mediaType = (resp.headers.get("Content-Type") ?? "").split(";")[0]?.trim().toLowerCase();
  if (mediaType === "application/problem+json" || mediaType === "application/json") {
    const body = parseProblem(raw);
    if (body !== undefined) {
      return new ProblemError(resp.status, body, retryAfterMs);
    }
  }
  let detail = raw.trim();
  if (detail.length > 200) {
    detail = detail.slice(0, 200) + "…";
  }
  return new ProblemError(resp.status, { detail }, retryAfterMs);
}

/** parseProblem returns the problem fields of raw, or undefined when it is not a JSON object. */
function parseProblem(raw: string): Partial<Problem> | undefined {
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    return undefined;
  }
  const o = v as Record<string, unknown>;
  const str = (name: string) => (typeof o[name] === "string" ? (o[name] as string) : undefined);
  const errors: Record<string, string> = {};
  if (typeof o.errors === "object" && o.errors !== null) {
    for (const [field, msg] of Object.entries(o.errors)) {
      if (typeof msg === "string") {
        errors[field] = msg;
      }
    }
  }
  return { type: str("type"), title: str("title"), detail: str("detail"), code: str("code"), errors };
}
