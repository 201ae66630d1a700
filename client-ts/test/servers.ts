// Test servers: a fake check API whose answers each test scripts, and a
// service protected by the middleware.
import { createServer, request, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Lease, LeaseRequest, SettleRequest, Settlement, Standing, WireCheckRequest, WireDecision } from "../src/index.js";

/**
 * patientMs is the timeoutMs of the tests' clients that expect an answer:
 * the default 500 ms can pass on a busy machine, and the fail mode would
 * decide instead.
 */
export const patientMs = 10_000;

/** listen starts server on a free loopback port and returns its base URL. */
export async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** close stops server, ending its idle connections. */
export async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** An answer of the fake check API. */
export interface FakeAnswer {
  status?: number;
  headers?: Record<string, string>;
  /** A decision, settlement, lease or standing (sent as JSON) or a raw body. */
  body: Partial<WireDecision> | Settlement | Lease | Standing | string;
}

/**
 * FakeCheckAPI records the checks and settlements it receives and answers
 * each with answer() or settleAnswer().
 */
export interface FakeCheckAPI {
  url: string;
  checks: WireCheckRequest[];
  settles: SettleRequest[];
  /** The renewals and releases: the path's last word and the lease ID. */
  leases: { op: string; lease_id: string }[];
  /** The requests to GET /v1/me: their method and headers. */
  looks: { method: string; headers: Record<string, string | string[] | undefined> }[];
  authorizations: string[];
  answer: (check: WireCheckRequest) => FakeAnswer;
  settleAnswer: (settle: SettleRequest) => FakeAnswer;
  /** Answers a renewal of a lease other than "gone" (by default: renewed, expiring at a fixed time). */
  renewAnswer: (leaseId: string) => FakeAnswer;
  /** Answers GET /v1/me for the key of its Authorization header. */
  meAnswer: (key: string) => FakeAnswer;
  /** Called after each renewal or release is answered. */
  onLease: () => void;
  /** Called after each settlement is answered. */
  onSettle: () => void;
  close: () => Promise<void>;
}

/** allowed is a decision of the fake, the hourly rule allowing. */
export const allowed: Partial<WireDecision> = {
  allowed: true, reason: "ok", tier: "authenticated", plan: "pro", limit: 5000, remaining: 4999,
  reset_after_ms: 720, retry_after_ms: 0, policy: "hourly", degraded: false, rules: [],
};

/** held is an allowed decision of the fake that opened the hold h1. */
export const held: Partial<WireDecision> = { ...allowed, hold_id: "h1", hold_expires_at: "2026-11-25T15:00:00.000Z" };

/** problem is an application/problem+json answer of the fake. */
export function problem(status: number, code: string, detail: string, errors?: Record<string, string>): FakeAnswer {
  return {
    status, headers: { "Content-Type": "application/problem+json" },
    body: JSON.stringify({ type: "about:blank", title: "", status, code, detail, errors }),
  };
}

/** hourlyHeaders are the rate-limit headers of an allowed hourly decision. */
export const hourlyHeaders = {
  "RateLimit-Policy": '"hourly";q=5000;w=3600',
  RateLimit: '"hourly";r=4999;t=1',
  "X-RateLimit-Limit": "5000",
  "X-RateLimit-Remaining": "4999",
  "X-RateLimit-Used": "1",
  "X-RateLimit-Reset": "1764000000",
};

/**
 * startFakeCheckAPI starts a fake check API that allows everything and
 * settles every hold at the cost asked until a test sets answer or
 * settleAnswer.
 */
export async function startFakeCheckAPI(): Promise<FakeCheckAPI> {
  const fake: FakeCheckAPI = {
    url: "", checks: [], settles: [], leases: [], looks: [], authorizations: [],
    answer: () => ({ headers: hourlyHeaders, body: allowed }),
    settleAnswer: (s) => ({ body: { hold_id: s.hold_id, estimate: 100, cost: s.cost, status: "settled", repeated: false } }),
    renewAnswer: (id) => ({ body: { lease_id: id, expires_at: "2026-11-25T15:00:30.000Z" } }),
    meAnswer: () => problem(401, "unauthorized", "the API key is not valid"),
    onSettle: () => undefined,
    onLease: () => undefined,
    close: async () => close(server),
  };
  const server = createServer(async (req, res) => {
    const text = await readBody(req);
    const body: unknown = text === "" ? undefined : JSON.parse(text);
    fake.authorizations.push(req.headers.authorization ?? "");
    let a: FakeAnswer;
    if (req.url === "/v1/me") {
      fake.looks.push({ method: req.method ?? "", headers: req.headers });
      a = fake.meAnswer((req.headers.authorization ?? "").replace(/^Bearer /, ""));
    } else if (req.url === "/v1/renew" || req.url === "/v1/release") {
      const id = (body as LeaseRequest).lease_id;
      fake.leases.push({ op: req.url.slice(4), lease_id: id });
      a = id === "gone" ? problem(404, "not_found", "no such lease")
        : req.url === "/v1/renew" ? fake.renewAnswer(id) : { body: { lease_id: id, released: true } };
      res.once("finish", () => fake.onLease());
    } else if (req.url === "/v1/settle") {
      fake.settles.push(body as SettleRequest);
      a = fake.settleAnswer(body as SettleRequest);
      res.once("finish", () => fake.onSettle());
    } else {
      fake.checks.push(body as WireCheckRequest);
      a = fake.answer(body as WireCheckRequest);
    }
    const json = typeof a.body !== "string";
    res.writeHead(a.status ?? 200, { "Content-Type": json ? "application/json" : "text/plain", ...a.headers });
    res.end(json ? JSON.stringify(a.body) : a.body);
  });
  fake.url = await listen(server);
  return fake;
}

/** readBody reads a request's body as text. */
export async function readBody(req: IncomingMessage): Promise<string> {
  let body = "";
  for await (const chunk of req) {
    body += String(chunk);
  }
  return body;
}

/** A service answer as a test sees it. */
export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/**
 * send sends a request to base with the raw path given (fetch would
 * resolve dot segments before sending) and returns the answer.
 */
export function send(base: string, method: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(base + "/", { method, path, headers }, async (res) => {
      resolve({ status: res.statusCode ?? 0, headers: res.headers, body: await readBody(res) });
    });
    req.on("error", reject);
    req.end();
  });
}

/** serve starts a node:http server that runs guard, then handler, as Connect would. */
export async function serve(
  guard: (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void,
  handler: RequestListener = (_req, res) => res.end("hello"),
): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    guard(req, res, (err) => {
      if (err !== undefined) {
        res.statusCode = 500;
        res.end(String(err));
        return;
      }
      handler(req, res);
    });
  });
  return { url: await listen(server), server };
}
