import assert from "node:assert/strict";
import type { IncomingMessage, ServerResponse } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";
import { costHeader, middleware, ProblemError, reportCost, TollgateClient, type MiddlewareOptions } from "../src/index.js";
import { allowed, close, patientMs, send, serve, startFakeCheckAPI, type FakeCheckAPI } from "./servers.js";

/** held is an allowed decision that opened the hold h1. */
const held = { ...allowed, hold_id: "h1", hold_expires_at: "2026-11-25T15:00:00.000Z" };

/** problem is a problem+json answer of the check API. */
function problem(status: number, code: string, detail: string, errors?: Record<string, string>) {
  return {
    status, headers: { "Content-Type": "application/problem+json" },
    body: JSON.stringify({ type: "about:blank", title: "", status, code, detail, errors }),
  };
}

describe("holds", () => {
  let fake: FakeCheckAPI;
  let client: TollgateClient;
  before(async () => {
    fake = await startFakeCheckAPI();
  });
  after(async () => fake.close());
  beforeEach(() => {
    client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs });
    fake.checks.length = 0;
    fake.settles.length = 0;
    fake.answer = () => ({ body: held });
    fake.settleAnswer = (s) => ({ body: { hold_id: s.hold_id, estimate: 100, cost: s.cost, status: "settled", repeated: false } });
  });

  test("a check with hold sends hold and hold_ttl_s (whole seconds, rounded up) and reads the hold", async () => {
    const d = await client.check({ key: "tg_x", cost: 10, hold: true, holdTtlS: 89.5 });
    await client.check({ key: "tg_x", cost: 10, hold: true });
    assert.deepEqual(fake.checks, [{ key: "tg_x", cost: 10, hold: true, hold_ttl_s: 90 }, { key: "tg_x", cost: 10, hold: true }]);
    assert.equal(d.hold_id, "h1");
    assert.equal(d.hold_expires_at, "2026-11-25T15:00:00.000Z");
  });

  test("settle posts the hold and the actual cost with the service token and returns the settlement", async () => {
    const s = await client.settle("h1", 3);
    assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 3 }]);
    assert.equal(fake.authorizations.at(-1), "Bearer t");
    assert.deepEqual(s, { hold_id: "h1", estimate: 100, cost: 3, status: "settled", repeated: false });
  });

  for (const [status, code, errors] of [
    [404, "not_found", undefined],
    [409, "conflict", undefined],
    [422, "invalid", { cost: "must be at least 0" }],
  ] as const) {
    test(`a ${status} settlement is a ProblemError`, async () => {
      fake.settleAnswer = () => problem(status, code, "refused", errors);
      const err = await client.settle("h1", 3).catch((e: unknown) => e);
      assert.ok(err instanceof ProblemError, String(err));
      assert.equal(err.status, status);
      assert.equal(err.code, code);
      assert.deepEqual(err.errors, errors ?? {});
    });
  }

  test("a settlement that is not one, or a check API that is down, rejects with an Error", async () => {
    fake.settleAnswer = () => ({ body: "<html>proxy</html>" });
    await assert.rejects(client.settle("h1", 3), /tollgate: settle: the answer is not JSON/);
    fake.settleAnswer = () => ({ body: { ...allowed } as never });
    await assert.rejects(client.settle("h1", 3), /not a settlement/);
    const down = new TollgateClient({ baseUrl: "http://127.0.0.1:1", serviceToken: "t" });
    await assert.rejects(down.settle("h1", 3), (err: unknown) => err instanceof Error && !(err instanceof ProblemError) && /^tollgate: settle:/.test(err.message));
    await assert.rejects(client.settle("h1", 3, AbortSignal.abort()), { name: "AbortError" });
  });

  test("a remembered denial answers the same request with hold locally, as the Go SDK does", async () => {
    fake.answer = () => ({ body: { ...allowed, allowed: false, reason: "rate_limited", remaining: 0, retry_after_ms: 60_000 } });
    await client.check({ key: "tg_x", resource: "POST /v1/complete", cost: 100 });
    const d = await client.check({ key: "tg_x", resource: "POST /v1/complete", cost: 100, hold: true });
    assert.equal(fake.checks.length, 1);
    assert.equal(d.remembered, true);
    assert.equal(d.allowed, false);
    assert.equal(d.hold_id, undefined);
  });
});

describe("middleware with holds", () => {
  let fake: FakeCheckAPI;
  let client: TollgateClient;
  before(async () => {
    fake = await startFakeCheckAPI();
  });
  after(async () => fake.close());
  beforeEach(() => {
    client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs });
    fake.checks.length = 0;
    fake.settles.length = 0;
    fake.answer = (check) => ({ body: check.hold ? held : allowed });
  });

  /**
   * settledAt serves one request through the middleware with opts and
   * handler, and returns the answer and the cost the hold was settled at
   * (undefined when nothing was settled within a second).
   */
  async function settledAt(opts: MiddlewareOptions, handler: (req: IncomingMessage, res: ServerResponse) => void, abort = false) {
    const settled = new Promise<void>((resolve) => {
      fake.onSettle = resolve;
    });
    const service = await serve(middleware(client, { cost: () => 100, ...opts }), handler);
    try {
      const answer = abort ? await sendAndHangUp(service.url) : await send(service.url, "POST", "/v1/complete", { "X-API-Key": "tg_x" });
      const timer = new Promise<void>((resolve) => setTimeout(resolve, 1000));
      await Promise.race([settled, timer]);
      return { answer, cost: fake.settles.at(-1)?.cost };
    } finally {
      await close(service.server);
    }
  }

  /** sendAndHangUp sends a request and closes the connection before the answer. */
  async function sendAndHangUp(url: string) {
    const ac = new AbortController();
    const sent = fetch(url + "/v1/complete", { method: "POST", headers: { "X-API-Key": "tg_x" }, signal: ac.signal }).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 200));
    ac.abort();
    await sent;
    return undefined;
  }

  test("a held request is checked with hold and the estimate and settled at the reported cost after a streamed body", async () => {
    const { answer, cost } = await settledAt({ hold: true }, (req, res) => {
      res.write("token ");
      setTimeout(() => {
        assert.equal(reportCost(req, 42), true);
        res.end("done");
      }, 20);
    });
    assert.equal(answer?.body, "token done");
    assert.deepEqual(fake.checks[0], { key: "tg_x", ip: fake.checks[0]?.ip, resource: "POST /v1/complete", cost: 100, hold: true });
    assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 42 }]);
    assert.equal(cost, 42);
  });

  test("a cost in the Tollgate-Cost header is taken and never reaches the caller", async () => {
    const { answer, cost } = await settledAt({ hold: () => true }, (_req, res) => {
      res.setHeader(costHeader, "17");
      res.end("done");
    });
    assert.equal(cost, 17);
    assert.equal(answer?.headers[costHeader.toLowerCase()], undefined);
  });

  test("unreported, the hold is settled at the estimate", async () => {
    const { cost } = await settledAt({ hold: true }, (_req, res) => res.end("done"));
    assert.equal(cost, 100);
  });

  test("refundOn 5xx settles a failed response at 0 whatever was reported; without it, at the report", async () => {
    const failing = (req: IncomingMessage, res: ServerResponse) => {
      reportCost(req, 42);
      res.statusCode = 502;
      res.end();
    };
    assert.equal((await settledAt({ hold: true, refundOn: ["5xx"] }, failing)).cost, 0);
    assert.equal((await settledAt({ hold: true }, failing)).cost, 42);
  });

  test("refundOn timeout settles at 0 when the caller goes away before the response finishes", async () => {
    const never = (req: IncomingMessage) => {
      reportCost(req, 42);
    };
    assert.equal((await settledAt({ hold: true, refundOn: ["timeout"] }, never, true)).cost, 0);
    assert.equal((await settledAt({ hold: true }, never, true)).cost, 42);
  });

  test("a request not held, or a decision without a hold, settles nothing and reportCost says so", async () => {
    let reported: boolean | undefined;
    const report = (req: IncomingMessage, res: ServerResponse) => {
      reported = reportCost(req, 5);
      res.end("done");
    };
    await settledAt({ hold: (req) => req.url !== "/v1/complete" }, report);
    assert.equal(fake.checks[0]?.hold, undefined);
    assert.equal(reported, false);
    fake.answer = () => ({ body: allowed }); // e.g. no rule matched
    await settledAt({ hold: true }, report);
    assert.equal(reported, false);
    assert.deepEqual(fake.settles, []);
  });
});
