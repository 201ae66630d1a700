import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type RequestListener, type ServerResponse } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";
import express from "express";
import {
  costHeader, decisionOf, middleware, reportCost, requestResource, TollgateClient, writeDenied, type Decision, type ExpressLike, type MiddlewareOptions,
} from "../src/index.js";
import { allowed, close, held, hourlyHeaders, listen, patientMs, problem, send, serve, startFakeCheckAPI, type FakeCheckAPI } from "./servers.js";

/** limited is the check API's answer to a rate-limited request. */
const limited = {
  headers: {
    "RateLimit-Policy": '"search";q=10;w=1', RateLimit: '"search";r=0;t=1', "X-RateLimit-Limit": "10",
    "X-RateLimit-Remaining": "0", "X-RateLimit-Used": "10", "X-RateLimit-Reset": "1764000001", "Retry-After": "1",
  },
  body: { ...allowed, allowed: false, reason: "rate_limited", limit: 10, remaining: 0, retry_after_ms: 100, policy: "search" },
};

describe("middleware", () => {
  let fake: FakeCheckAPI;
  let client: TollgateClient;
  before(async () => {
    fake = await startFakeCheckAPI();
  });
  after(async () => fake.close());
  beforeEach(() => {
    client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs });
    fake.checks.length = 0;
    fake.answer = () => ({ headers: hourlyHeaders, body: allowed });
    fake.settleAnswer = (s) => ({ body: { hold_id: s.hold_id, estimate: 100, cost: s.cost, status: "settled", repeated: false } });
    fake.renewAnswer = (id) => ({ body: { lease_id: id, expires_at: "2026-11-25T15:00:30.000Z" } });
    fake.onSettle = () => undefined;
  });

  /**
   * served starts a service protected by the middleware with opts in
   * front of handler (by default one that answers "hello"), runs use on
   * its URL, and stops the service.
   */
  async function served<T>(opts: Parameters<typeof middleware>[1], handler: RequestListener | undefined, use: (url: string) => Promise<T>): Promise<T> {
    const service = await serve(middleware(client, opts), handler);
    try {
      return await use(service.url);
    } finally {
      await close(service.server);
    }
  }

  /** through starts a service protected by the middleware with opts, sends one request, and stops the service. */
  async function through(opts: Parameters<typeof middleware>[1], method: string, path: string, headers: Record<string, string> = {}) {
    let seen: Decision | undefined;
    const answer = await served(opts, (req, res) => {
      seen = decisionOf(req);
      res.end("hello");
    }, (url) => send(url, method, path, headers));
    return { answer, seen };
  }

  /** slowChecks is a fetch whose checks are answered ms late, after the caller of sendAndHangUp is gone. */
  function slowChecks(ms: number): typeof fetch {
    return async (input, init) => {
      const answer = await fetch(input, init);
      if (String(input).endsWith("/v1/check")) {
        await new Promise((resolve) => setTimeout(resolve, ms));
      }
      return answer;
    };
  }

  /** started returns a promise and the function that resolves it, for a handler to say that it runs. */
  function started(): { running: Promise<void>; run: () => void } {
    let run = () => undefined as void;
    const running = new Promise<void>((resolve) => {
      run = resolve;
    });
    return { running, run };
  }

  /** endWhenGone is a handler that ends the response only once its caller has gone away. */
  function endWhenGone(_req: IncomingMessage, res: ServerResponse): void {
    res.once("close", () => res.end());
  }

  /**
   * sendAndHangUp sends POST /v1/complete with headers and closes the
   * connection before the answer: 200 ms after sending, or once after
   * has resolved (the handler started, say).
   */
  async function sendAndHangUp(url: string, headers: Record<string, string> = {}, after?: Promise<unknown>) {
    const ac = new AbortController();
    const sent = fetch(url + "/v1/complete", { method: "POST", headers, signal: ac.signal }).catch(() => undefined);
    await (after ?? new Promise((resolve) => setTimeout(resolve, 200)));
    ac.abort();
    await sent;
    return undefined;
  }

  test("an allowed request reaches the handler with the rate-limit headers set", async () => {
    const { answer, seen } = await through({}, "GET", "/v1/repos?page=2", { Authorization: "Bearer tg_key" });
    assert.equal(answer.status, 200);
    assert.equal(answer.body, "hello");
    for (const [name, value] of Object.entries(hourlyHeaders)) {
      assert.equal(answer.headers[name.toLowerCase()], value, name);
    }
    assert.equal(answer.headers["retry-after"], undefined);
    assert.equal(seen?.plan, "pro");
    assert.equal(fake.checks.length, 1);
    assert.equal(fake.checks[0]?.key, "tg_key");
    assert.equal(fake.checks[0]?.resource, "GET /v1/repos");
    assert.match(fake.checks[0]?.ip ?? "", /127\.0\.0\.1/);
  });

  test("a rate-limited request is a 429 problem with the check API's headers, exactly", async () => {
    fake.answer = () => limited;
    const { answer, seen } = await through({}, "POST", "/v1/search", { "X-API-Key": "tg_key" });
    assert.equal(seen, undefined, "the handler must not run");
    assert.equal(answer.status, 429);
    assert.equal(answer.headers["content-type"], "application/problem+json");
    assert.equal(answer.headers["cache-control"], "no-store");
    for (const [name, value] of Object.entries(limited.headers)) {
      assert.equal(answer.headers[name.toLowerCase()], value, name);
    }
    assert.deepEqual(JSON.parse(answer.body), {
      type: "about:blank", title: "Too Many Requests", status: 429, detail: "rate limit exceeded; retry after 1 s", code: "rate_limited",
    });
    assert.equal(fake.checks[0]?.key, "tg_key");
  });

  for (const [reason, status, authenticate] of [
    ["invalid_key", 401, 'Bearer error="invalid_token"'],
    ["key_required", 401, "Bearer"],
    ["key_revoked", 403, undefined],
    ["key_expired", 403, undefined],
    ["tenant_suspended", 403, undefined],
    ["unavailable", 503, undefined],
    ["spend_cap", 429, undefined],
    ["credits_exhausted", 402, undefined],
    ["something_new", 403, undefined],
  ] as const) {
    test(`${reason} is a ${status}`, async () => {
      fake.answer = () => ({ body: { ...allowed, allowed: false, reason, retry_after_ms: 0 } });
      const { answer } = await through({}, "GET", "/", { "X-API-Key": "tg_key" });
      assert.equal(answer.status, status);
      assert.equal(answer.headers["www-authenticate"], authenticate);
      const body = JSON.parse(answer.body) as { code: string; status: number };
      assert.equal(body.code, reason);
      assert.equal(body.status, status);
    });
  }

  test("fail closed when the check API answers 500: a 503 with Retry-After", async () => {
    fake.answer = () => ({ status: 500, body: "boom" });
    client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs, failMode: "closed" });
    const { answer } = await through({}, "GET", "/");
    assert.equal(answer.status, 503);
    assert.equal(answer.headers["retry-after"], "1");
  });

  test("keyGenerator, ip, resource, cost and skip replace the defaults", async () => {
    const opts = {
      keyGenerator: (req: IncomingMessage) => String(req.headers["api-key"] ?? ""),
      ip: () => "198.51.100.9",
      resource: async () => "GET /custom",
      cost: () => 7,
      skip: (req: IncomingMessage) => req.url === "/healthz",
    };
    const probe = await through(opts, "GET", "/healthz");
    assert.equal(probe.answer.status, 200);
    assert.equal(fake.checks.length, 0, "a skipped request is not checked");
    assert.equal(probe.seen, undefined);
    await through(opts, "GET", "/x", { "api-key": "key1" });
    assert.deepEqual(fake.checks, [{ key: "key1", ip: "198.51.100.9", resource: "GET /custom", cost: 7, auto_hold: true }]);
  });

  test("an ip callback may return a promise", async () => {
    await through({ ip: async () => "198.51.100.9" }, "GET", "/x");
    assert.equal(fake.checks[0]?.ip, "198.51.100.9");
  });

  test("without hold, the check asks for a hold where a rule wants one (auto_hold); hold false asks for none", async () => {
    await through({}, "POST", "/v1/complete", { "X-API-Key": "tg_x" });
    await through({ hold: false }, "POST", "/v1/complete", { "X-API-Key": "tg_x" });
    await through({ hold: () => false }, "POST", "/v1/complete", { "X-API-Key": "tg_x" });
    assert.deepEqual(fake.checks.map((c) => [c.hold, c.auto_hold]), [[undefined, true], [undefined, undefined], [undefined, undefined]]);
  });

  test("an over-long key is a 401 invalid_key, not the 500 of a body too large, and is not sent", async () => {
    // As the check API does with a body over 16 KiB.
    fake.answer = (check) => ((check.key ?? "").length > 16 << 10 ? problem(413, "too_large", "the body is larger than 16384 bytes") : { body: allowed });
    const { answer, seen } = await through({ keyGenerator: () => "k".repeat(17 << 10) }, "GET", "/");
    assert.equal(seen, undefined, "the handler must not run");
    assert.equal(answer.status, 401);
    assert.equal(answer.headers["www-authenticate"], 'Bearer error="invalid_token"');
    assert.equal(JSON.parse(answer.body).code, "invalid_key");
    assert.equal(fake.checks.length, 0);
  });

  for (const [name, failMode, check, status] of [
    ["a 200 that is not a decision, fail open: 500", "open", { body: { nope: 1 } as never }, 500],
    ["a 200 that is not a decision, fail closed: 500", "closed", { body: { nope: 1 } as never }, 500],
    ["a load balancer's 404, fail open: 500", "open", { status: 404, body: "<h1>Not Found</h1>" }, 500],
    ["a WAF's 403, fail open: 500", "open", { status: 403, headers: { "Content-Type": "text/html" }, body: "<html>Request blocked</html>" }, 500],
    ["a proxy's 502, fail open: the handler runs", "open", { status: 502, body: "<h1>Bad Gateway</h1>" }, 200],
    ["a proxy's 429, fail closed: 503", "closed", { status: 429, body: "slow down" }, 503],
  ] as const) {
    test(name, async () => {
      fake.answer = () => check;
      client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs, failMode });
      const { answer, seen } = await through({}, "GET", "/", { Authorization: "Bearer ' OR 1=1 --" });
      assert.equal(answer.status, status);
      assert.equal(seen !== undefined, status === 200, "the handler runs only for a 200");
    });
  }

  test("the Tollgate-Cost header never reaches the caller, held or not", async () => {
    const answer = await served({}, (_req, res) => {
      res.setHeader(costHeader, "7");
      res.end("done");
    }, (url) => send(url, "GET", "/v1/repos"));
    assert.equal(answer.status, 200);
    assert.equal(answer.headers[costHeader.toLowerCase()], undefined);
    assert.equal(answer.headers["ratelimit"], hourlyHeaders.RateLimit);
  });

  for (const [name, writeHead] of [
    ["an object", (res: ServerResponse) => res.writeHead(200, { "Content-Type": "text/plain", "Tollgate-Cost": "7" })],
    ["an object, in another case, after a status message", (res: ServerResponse) => res.writeHead(200, "Fine", { "tollgate-cost": 7, "X-Kept": "yes" })],
    ["a flat list", (res: ServerResponse) => res.writeHead(200, ["Content-Type", "text/plain", "Tollgate-Cost", "7"])],
  ] as const) {
    test(`the Tollgate-Cost header in writeHead's headers, as ${name}, never reaches the caller`, async () => {
      const answer = await served({}, (_req, res) => {
        writeHead(res);
        res.end("done");
      }, (url) => send(url, "GET", "/v1/repos"));
      assert.equal(answer.status, 200);
      assert.equal(answer.body, "done");
      assert.equal(answer.headers[costHeader.toLowerCase()], undefined);
      assert.equal(answer.headers["ratelimit"], hourlyHeaders.RateLimit);
    });
  }

  test("onLimitReached answers denials, with the headers already set", async () => {
    fake.answer = () => limited;
    const { answer } = await through({
      onLimitReached: (_req: IncomingMessage, res: ServerResponse, d: Decision) => {
        if (d.reason !== "rate_limited") {
          writeDenied(_req, res, d);
          return;
        }
        res.statusCode = 429;
        res.end(JSON.stringify({ error: "Too Many Requests", policy: d.policy }));
      },
    }, "GET", "/");
    assert.equal(answer.status, 429);
    assert.deepEqual(JSON.parse(answer.body), { error: "Too Many Requests", policy: "search" });
    assert.equal(answer.headers["ratelimit-policy"], '"search";q=10;w=1');
  });

  test("a refused check goes to onError: by default a 500 problem", async () => {
    fake.answer = () => ({ status: 401, headers: { "Content-Type": "application/problem+json" }, body: '{"status":401,"code":"unauthorized"}' });
    const { answer } = await through({}, "GET", "/");
    assert.equal(answer.status, 500);
    assert.equal(JSON.parse(answer.body).code, "internal");
    let seen: unknown;
    const handed = await through({ onError: (_req, _res, err, next) => { seen = err; next(err); } }, "GET", "/");
    assert.equal(handed.answer.status, 500);
    assert.match(String(seen), /401 unauthorized/);
  });

  describe("holds", () => {
    beforeEach(() => {
      fake.settles.length = 0;
      fake.answer = (check) => ({ body: check.hold ? held : allowed });
    });

    /**
     * settledAt serves one request through the middleware with opts and
     * handler, and returns the answer and the cost the hold was settled at
     * (undefined when nothing was settled within a second).
     */
    async function settledAt(opts: MiddlewareOptions, handler: (req: IncomingMessage, res: ServerResponse) => void, abort: boolean | Promise<void> = false) {
      const settled = new Promise<void>((resolve) => {
        fake.onSettle = resolve;
      });
      const key = { "X-API-Key": "tg_x" };
      return served({ cost: () => 100, ...opts }, handler, async (url) => {
        const answer = abort ? await sendAndHangUp(url, key, abort === true ? undefined : abort) : await send(url, "POST", "/v1/complete", key);
        const timer = new Promise<void>((resolve) => setTimeout(resolve, 1000));
        await Promise.race([settled, timer]);
        return { answer, cost: fake.settles.at(-1)?.cost };
      });
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

    test("refundOn timeout settles at 0 when the caller went away before anything was written or reported, once the handler ends", async () => {
      assert.equal((await settledAt({ hold: true, refundOn: ["timeout"] }, endWhenGone, true)).cost, 0);
      assert.equal((await settledAt({ hold: true }, endWhenGone, true)).cost, 100);
    });

    // A caller controls its own disconnection: one that read its answer
    // and hung up before the response finished was served, and is charged.
    for (const [name, handler, want] of [
      ["a cost reported, nothing written", (req: IncomingMessage) => {
        reportCost(req, 42);
      }, 42],
      ["a cost given to writeHead, nothing written", (_req: IncomingMessage, res: ServerResponse) => {
        res.writeHead(200, { "Tollgate-Cost": "42" });
        res.flushHeaders();
      }, 42],
      ["some of the body written, no cost reported: the estimate", (_req: IncomingMessage, res: ServerResponse) => {
        res.write("data: the whole answer\n\ndata: [DONE]\n\n");
      }, 100],
      ["some of the body written and a cost reported", (req: IncomingMessage, res: ServerResponse) => {
        reportCost(req, 42);
        res.write("data: the whole answer\n\ndata: [DONE]\n\n");
      }, 42],
    ] as const) {
      test(`refundOn timeout: a caller that hangs up is charged, ${name}`, async () => {
        const thenEndWhenGone = (req: IncomingMessage, res: ServerResponse) => {
          handler(req, res);
          endWhenGone(req, res);
        };
        assert.equal((await settledAt({ hold: true, refundOn: ["timeout"] }, thenEndWhenGone, true)).cost, want);
      });
    }

    test("a cost given to writeHead is settled, and never reaches the caller", async () => {
      for (const [writeHead, want] of [
        [(res: ServerResponse) => res.writeHead(200, { "Tollgate-Cost": "17" }), 17],
        [(res: ServerResponse) => res.writeHead(200, "OK", ["Tollgate-Cost", "18"]), 18],
        // Node takes a list of pairs only from a response without headers set before.
        [(res: ServerResponse) => res.writeHead(200, [["tollgate-cost", "19"]] as never), 19],
        [(res: ServerResponse) => {
          res.setHeader(costHeader, "5");
          res.writeHead(200, { "Tollgate-Cost": "20" }); // writeHead's own win, as Node makes them
        }, 20],
      ] as const) {
        const { answer, cost } = await settledAt({ hold: true }, (_req, res) => {
          writeHead(res);
          res.end("done");
        });
        assert.equal(cost, want);
        assert.equal(answer?.headers[costHeader.toLowerCase()], undefined);
      }
    });

    test("the outcomes the hold's rules list (hold_refund_on) are refunded too", async () => {
      fake.answer = () => ({ body: { ...held, hold_refund_on: ["5xx"] } });
      const failing = (req: IncomingMessage, res: ServerResponse) => {
        reportCost(req, 42);
        res.statusCode = 502;
        res.end();
      };
      assert.equal((await settledAt({}, failing)).cost, 0);
      assert.equal((await settledAt({ refundOn: ["timeout"] }, failing)).cost, 0);
      fake.answer = () => ({ body: held });
      assert.equal((await settledAt({}, failing)).cost, 42);
    });

    test("a hold opened because a rule asks for one (auto_hold) is settled at the reported cost", async () => {
      fake.answer = (check) => ({ body: check.auto_hold ? held : allowed });
      const { cost } = await settledAt({}, (req, res) => {
        reportCost(req, 9);
        res.end("done");
      });
      assert.equal(fake.checks[0]?.auto_hold, true);
      assert.equal(cost, 9);
    });

    /** notServedAndSettledAtZero sends a held request whose caller goes away at once, and asserts that its handler never ran and its hold h1 was settled at 0. */
    async function notServedAndSettledAtZero(): Promise<void> {
      let handled = false;
      const { cost } = await settledAt({ hold: true }, (_req, res) => {
        handled = true;
        res.end("done");
      }, true);
      assert.equal(handled, false);
      assert.equal(cost, 0);
      assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 0 }]);
    }

    test("a caller gone during a shaping delay is not served, and its hold is settled at 0 at once", async () => {
      fake.answer = () => ({ body: { ...held, delay_ms: 60_000 } });
      await notServedAndSettledAtZero();
    });

    test("a held request that took a lease is settled, which releases the lease; it is not released apart", async () => {
      fake.leases.length = 0;
      fake.answer = () => ({ body: { ...held, lease_id: "l1", lease_expires_at: "2026-11-25T15:00:30.000Z" } });
      const { cost } = await settledAt({ hold: true }, (_req, res) => res.end("done"));
      assert.equal(cost, 100);
      assert.deepEqual(fake.leases, []);
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

    // The caller going away does not end the handler's work: Node fires
    // 'close' at once, and the handler goes on. The hold is settled when
    // the handler is done, at what it reports then.
    test("a caller that hangs up mid-handler: nothing is settled until the handler ends, then at the cost it reported", async () => {
      for (const refundOn of [[], ["timeout"]] as const) {
        fake.settles.length = 0;
        let settledBeforeEnd = -1;
        let reportedAgain: boolean | undefined;
        const handler = started();
        const { cost } = await settledAt({ hold: true, refundOn }, (req, res) => {
          handler.run();
          setTimeout(() => {
            settledBeforeEnd = fake.settles.length;
            reportCost(req, 3000); // as the README's example does, once its work is done
            res.end("the answer");
            reportedAgain = reportCost(req, 1);
          }, 300);
        }, handler.running);
        assert.equal(settledBeforeEnd, 0, "settled while the handler was still running");
        assert.equal(cost, 3000, `refundOn ${refundOn.join()}`);
        assert.equal(reportedAgain, false, "a cost reported after the settlement is not taken");
        assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 3000 }]);
      }
    });

    test("a handler that reports its cost from the response's close event is settled at it", async () => {
      for (const refundOn of [[], ["timeout"]] as const) {
        const handler = started();
        const { cost } = await settledAt({ hold: true, refundOn }, (req, res) => {
          handler.run();
          const work = setTimeout(() => res.end("done"), 5000);
          res.on("close", () => {
            clearTimeout(work);
            reportCost(req, 42); // the caller is gone: settled at once
          });
        }, handler.running);
        assert.equal(cost, 42, `refundOn ${refundOn.join()}`);
      }
    });

    test("a handler that never ends the response of a caller gone is settled shortly before its hold would expire", async () => {
      for (const [refundOn, report, want] of [[[], undefined, 100], [["timeout"], undefined, 100], [["timeout"], 42, 42]] as const) {
        fake.settles.length = 0;
        fake.answer = () => ({
          headers: { Date: new Date().toUTCString() },
          body: { ...held, hold_expires_at: new Date(Date.now() + 2500).toISOString() }, // 1.5 to 2.5 s left by the Date
        });
        const handler = started();
        const { cost } = await served({ hold: true, cost: () => 100, refundOn }, (req, res) => {
          handler.run();
          if (report !== undefined) {
            reportCost(req, report);
          }
          res.write("data: the whole answer\n\ndata: [DONE]\n\n"); // and no more: a pipe stopped at the disconnection
        }, async (url) => {
          await sendAndHangUp(url, { "X-API-Key": "tg_x" }, handler.running);
          await new Promise((resolve) => setTimeout(resolve, 100));
          const settledAtClose = fake.settles.length;
          await new Promise((resolve) => setTimeout(resolve, 2500));
          assert.equal(settledAtClose, 0, "settled as the caller went away");
          return { cost: fake.settles.at(-1)?.cost };
        });
        assert.equal(cost, want, `refundOn ${refundOn.join()}, reported ${report}`);
        assert.equal(fake.settles.length, 1);
      }
    });

    test("a caller gone before the check answered is not served, and its hold is settled at 0", async () => {
      client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs, fetch: slowChecks(500) });
      await notServedAndSettledAtZero();
    });

    test("reportCost throws a TypeError for a cost that is not a whole number of units, and the hold keeps the estimate", async () => {
      const thrown: unknown[] = [];
      const { cost } = await settledAt({ hold: true }, (req, res) => {
        for (const bad of [12.34, Number.NaN, Number.POSITIVE_INFINITY, -1]) {
          try {
            reportCost(req, bad);
          } catch (err) {
            thrown.push(err);
          }
        }
        res.end("done");
      });
      assert.equal(thrown.length, 4);
      assert.ok(thrown.every((err) => err instanceof TypeError), String(thrown));
      assert.equal(cost, 100);
      assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 100 }]);
    });

    test("a settlement the check API could not answer is retried at the same cost after the response, which waits for the first attempt only", async () => {
      for (const failure of [problem(503, "unavailable", "the limiter store did not answer; retry the settlement"), problem(429, "", ""), problem(408, "", "")]) {
        fake.settles.length = 0;
        let failures = 2;
        fake.settleAnswer = (s) => failures-- > 0 ? failure
          : { body: { hold_id: s.hold_id, estimate: 100, cost: s.cost, status: "settled", repeated: false } };
        const settled = new Promise<void>((resolve) => {
          fake.onSettle = () => fake.settles.length === 3 && resolve();
        });
        const arrived = started(); // the answer has reached the caller
        let attempts = 0;
        let endedBeforeFirst = false;
        client = new TollgateClient({
          baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs,
          fetch: async (input, init) => {
            if (String(input).endsWith("/v1/settle")) {
              if (++attempts === 1) {
                // A response that does not wait for this attempt arrives meanwhile.
                endedBeforeFirst = await Promise.race([arrived.running.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 300))]);
              } else {
                // A response that waits for the retries never arrives before them.
                await Promise.race([arrived.running, new Promise((resolve) => setTimeout(resolve, 3000))]);
              }
            }
            return fetch(input, init);
          },
        });
        const answered = await served({ hold: true, cost: () => 100 }, (req, res) => {
          reportCost(req, 42);
          res.end("done");
        }, async (url) => {
          const answer = await send(url, "POST", "/v1/complete", { "X-API-Key": "tg_x" });
          const settlesByAnswer = fake.settles.length;
          arrived.run();
          await Promise.race([settled, new Promise((resolve) => setTimeout(resolve, 3000))]);
          return { answer, settlesByAnswer };
        });
        assert.equal(answered.answer.body, "done");
        assert.equal(endedBeforeFirst, false, "the response ended before the first settlement was answered");
        assert.equal(answered.settlesByAnswer, 1, "the first attempt was made before the response ended, the retries after");
        assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 42 }, { hold_id: "h1", cost: 42 }, { hold_id: "h1", cost: 42 }], String(failure.status));
      }
    });

    test("a settlement is retried after a transport error, not after a refusal, and at most four times", async () => {
      let failing = 1;
      client = new TollgateClient({
        baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs,
        fetch: (input, init) => String(input).endsWith("/v1/settle") && failing-- > 0 ? Promise.reject(new TypeError("fetch failed")) : fetch(input, init),
      });
      const { cost } = await settledAt({ hold: true }, (_req, res) => res.end("done"));
      assert.equal(cost, 100);
      assert.deepEqual(fake.settles, [{ hold_id: "h1", cost: 100 }]); // the first never reached the fake

      for (const [answer, want] of [[problem(409, "conflict", "settled at another cost"), 1], [problem(503, "unavailable", ""), 4]] as const) {
        client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs });
        fake.settles.length = 0;
        fake.settleAnswer = () => answer;
        await settledAt({ hold: true }, (_req, res) => res.end("done"));
        await new Promise((resolve) => setTimeout(resolve, 2500)); // the backoff: 100, 300, 900 ms, jittered up to half again
        assert.equal(fake.settles.length, want, String(answer.status));
      }
    });
  });

  describe("leases", () => {
    /** leased is an allowed decision that took the lease l1 on a concurrency rule. */
    const leased = { ...allowed, lease_id: "l1", lease_expires_at: "2026-11-25T15:00:30.000Z" };
    let released: Promise<void>;
    let releaseCalls: number;
    beforeEach(() => {
      fake.leases.length = 0;
      fake.answer = () => ({ body: leased });
      released = new Promise<void>((resolve) => {
        fake.onLease = resolve;
      });
      releaseCalls = 0;
      // Counts the releases as they are sent, before any is answered.
      const counting: typeof fetch = (input, init) => {
        if (String(input).endsWith("/v1/release")) {
          releaseCalls++;
        }
        return fetch(input, init);
      };
      client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs, fetch: counting });
    });

    /** releasedWithin waits up to a second for the first release to be answered. */
    async function releasedWithin(): Promise<void> {
      await Promise.race([released, new Promise<void>((resolve) => setTimeout(resolve, 1000))]);
    }

    /** assertReleasedOnce asserts that one release was sent, and that the fake saw it release leaseId and nothing else. */
    function assertReleasedOnce(leaseId: string): void {
      assert.deepEqual(fake.leases, [{ op: "release", lease_id: leaseId }]);
      assert.equal(releaseCalls, 1);
    }

    test("an admitted request's lease is released once when its response has finished", async () => {
      const { answer } = await through({}, "POST", "/v1/complete", { "X-API-Key": "tg_x" });
      assert.equal(answer.status, 200);
      await releasedWithin();
      assertReleasedOnce("l1");
    });

    test("the lease is released once when the handler ends the response of a caller that went away", async () => {
      await served({}, endWhenGone, async (url) => {
        await sendAndHangUp(url);
        await releasedWithin();
      });
      assertReleasedOnce("l1");
    });

    test("a denied check releases nothing", async () => {
      fake.answer = (check) => ({ body: check.resource === "GET /denied" ? { ...leased, allowed: false, reason: "rate_limited", retry_after_ms: 0 } : leased });
      await served({}, undefined, async (url) => {
        assert.equal((await send(url, "GET", "/denied")).status, 429);
        fake.answer = () => ({ body: { ...leased, lease_id: "l2" } });
        assert.equal((await send(url, "GET", "/allowed")).status, 200);
        await releasedWithin();
      });
      assertReleasedOnce("l2");
    });

    test("the lease of a caller gone during a shaping delay is released at once, and the handler never runs", async () => {
      fake.answer = () => ({ body: { ...leased, delay_ms: 60_000 } });
      let handled = false;
      await served({}, () => {
        handled = true;
      }, async (url) => {
        await sendAndHangUp(url);
        await releasedWithin();
      });
      assert.equal(handled, false);
      assertReleasedOnce("l1");
    });

    test("a failed release is dropped", async () => {
      fake.answer = () => ({ body: { ...leased, lease_id: "gone" } });
      const { answer } = await through({}, "GET", "/");
      assert.equal(answer.status, 200);
      await releasedWithin();
      assert.deepEqual(fake.leases, [{ op: "release", lease_id: "gone" }]);
    });

    test("a lease is not released while the handler still runs after its caller went away; it is when the handler ends", async () => {
      let releasedBeforeEnd = -1;
      const handler = started();
      await served({}, (_req, res) => {
        handler.run();
        setTimeout(() => {
          releasedBeforeEnd = fake.leases.length;
          res.end("done");
        }, 400);
      }, async (url) => {
        await sendAndHangUp(url, {}, handler.running);
        await releasedWithin();
      });
      assert.equal(releasedBeforeEnd, 0, "released while the handler was still running");
      assertReleasedOnce("l1");
    });

    test("a caller gone before the check answered is not served, and its lease is released", async () => {
      client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs, fetch: slowChecks(500) });
      let handled = false;
      await served({}, (_req, res) => {
        handled = true;
        res.end("done");
      }, async (url) => {
        await sendAndHangUp(url);
        await releasedWithin();
      });
      assert.equal(handled, false);
      assert.deepEqual(fake.leases, [{ op: "release", lease_id: "l1" }]);
    });

    for (const [name, hold] of [["released", false], ["settled", true]] as const) {
      test(`on a concurrency rule of 1, sequential requests are all allowed: the response waits for the lease to be ${name}`, async () => {
        // One slot: a check is denied while a lease it gave is neither
        // released nor settled; each give-back takes 50 ms to arrive.
        let given = 0;
        fake.settles.length = 0;
        fake.answer = () => {
          const freed = fake.leases.filter((l) => l.op === "release").length + fake.settles.length;
          if (given > freed) {
            return { body: { ...allowed, allowed: false, reason: "rate_limited", retry_after_ms: 30_000, policy: "inflight" } };
          }
          given++;
          const lease = { ...leased, lease_id: `l${given}` };
          return { body: hold ? { ...lease, hold_id: `h${given}` } : lease };
        };
        const slow: typeof fetch = async (input, init) => {
          if (/\/v1\/(release|settle)$/.test(String(input))) {
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
          return fetch(input, init);
        };
        client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs, fetch: slow });
        await served({ hold }, undefined, async (url) => {
          for (let i = 1; i <= 10; i++) {
            const answer = await send(url, "POST", "/v1/complete", { "X-API-Key": "tg_x" });
            assert.equal(answer.status, 200, `request ${i}: ${answer.body}: the slot of the request before was still taken`);
          }
        });
        assert.equal(given, 10);
      });
    }

    test("a response waiting for its release ends at once when its caller goes away; the release is still made", async () => {
      const releasing = started(); // the release has been sent
      const unblock = started();
      client = new TollgateClient({
        baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs,
        fetch: async (input, init) => {
          if (String(input).endsWith("/v1/release")) {
            releasing.run();
            await Promise.race([unblock.running, new Promise((resolve) => setTimeout(resolve, 3000))]);
          }
          return fetch(input, init);
        },
      });
      let endedAtClose: boolean | undefined;
      await served({}, (_req, res) => {
        res.end("done");
        res.once("close", () => setImmediate(() => {
          endedAtClose = res.writableEnded;
        }));
      }, async (url) => {
        await sendAndHangUp(url, {}, releasing.running);
        await new Promise((resolve) => setTimeout(resolve, 100));
        unblock.run();
        await releasedWithin();
      });
      assert.equal(endedAtClose, true, "the response of a caller gone waited for its release");
      assert.deepEqual(fake.leases, [{ op: "release", lease_id: "l1" }]);
    });

    test("a release the check API could not answer is retried", async () => {
      let failing = 1;
      const failingOnce: typeof fetch = (input, init) =>
        String(input).endsWith("/v1/release") && failing-- > 0 ? Promise.resolve(new Response("", { status: 502 })) : fetch(input, init);
      client = new TollgateClient({ baseUrl: fake.url, serviceToken: "t", timeoutMs: patientMs, fetch: failingOnce });
      await through({}, "GET", "/");
      await releasedWithin();
      assert.deepEqual(fake.leases, [{ op: "release", lease_id: "l1" }]);
    });
  });

  describe("renewals", () => {
    /**
     * serverClock answers the checks with a lease of ttlMs and its
     * renewals, as a check API whose clock is skewMs ahead of this
     * machine's would: lease_expires_at and Date by its clock.
     */
    function serverClock(skewMs: number, ttlMs: number): void {
      const now = () => new Date(Date.now() + skewMs);
      fake.leases.length = 0;
      fake.answer = () => ({
        headers: { Date: now().toUTCString() },
        body: { ...allowed, lease_id: "l1", lease_expires_at: new Date(now().getTime() + ttlMs).toISOString() },
      });
      fake.renewAnswer = (id) => ({ headers: { Date: now().toUTCString() }, body: { lease_id: id, expires_at: new Date(now().getTime() + ttlMs).toISOString() } });
    }

    /** runFor serves one request whose handler takes ms, and returns the leases' calls by the end of the request and a little after. */
    async function runFor(ms: number): Promise<{ ops: string[]; after: string[] }> {
      const ops = await served({}, (_req, res) => {
        setTimeout(() => res.end("done"), ms);
      }, async (url) => {
        await send(url, "GET", "/");
        return fake.leases.map((l) => l.op);
      });
      await new Promise((resolve) => setTimeout(resolve, 1200));
      return { ops, after: fake.leases.map((l) => l.op) };
    }

    for (const [name, skewMs] of [["the same", 0], ["an hour ahead", 3_600_000], ["an hour behind", -3_600_000]] as const) {
      test(`a lease is renewed while the handler runs, a third of its life ahead, with the server's clock ${name}`, async () => {
        serverClock(skewMs, 3000); // renewed about a second after each answer, whatever the clocks
        const { ops, after } = await runFor(2600);
        const renewals = ops.filter((op) => op === "renew").length;
        assert.ok(renewals >= 1 && renewals <= 4, `${renewals} renewals: ${ops.join()}`);
        assert.deepEqual(after, [...ops.filter((op) => op === "renew"), "release"], "renewed after the handler was done");
      });
    }

    test("a lease is renewed by the server's own count of what it has left (lease_ttl_ms, ttl_ms), without a Date", async () => {
      const now = () => new Date(Date.now() + 3_600_000); // the server's clock an hour ahead, and no Date header
      fake.leases.length = 0;
      fake.answer = () => ({
        body: { ...allowed, lease_id: "l1", lease_expires_at: new Date(now().getTime() + 3000).toISOString(), lease_ttl_ms: 3000 },
      });
      fake.renewAnswer = (id) => ({ body: { lease_id: id, expires_at: new Date(now().getTime() + 3000).toISOString(), ttl_ms: 3000 } });
      const { ops, after } = await runFor(2600);
      const renewals = ops.filter((op) => op === "renew").length;
      assert.ok(renewals >= 1 && renewals <= 4, `${renewals} renewals: ${ops.join()}`);
      assert.deepEqual(after, [...ops.filter((op) => op === "renew"), "release"], "renewed after the handler was done");
    });

    test("renewals stop once the lease is gone (404)", async () => {
      serverClock(0, 1500);
      fake.renewAnswer = () => problem(404, "not_found", "no such lease");
      const { after } = await runFor(1500);
      assert.deepEqual(after, ["renew", "release"]);
    });

    test("a lease already expired by the server's clock is not renewed", async () => {
      serverClock(0, 0);
      const { after } = await runFor(500);
      assert.deepEqual(after, ["release"]);
    });
  });

  describe("with Express", () => {
    /**
     * expressApp starts an Express app with the middleware (opts) in
     * front of POST /v1/search, its settings set first, and returns its
     * URL and server.
     */
    async function expressApp(opts: MiddlewareOptions = {}, settings: Record<string, unknown> = {}) {
      const app = express();
      for (const [name, value] of Object.entries(settings)) {
        app.set(name, value);
      }
      app.use(middleware(client, opts));
      app.post("/v1/search", (_req, res) => {
        res.send("found");
      });
      const server = createServer(app);
      return { url: await listen(server), server };
    }

    /** sendTo sends one request to a fresh Express app and returns the answer and the resource checked. */
    async function sendTo(path: string, opts: MiddlewareOptions = {}, settings: Record<string, unknown> = {}) {
      fake.checks.length = 0;
      const app = await expressApp(opts, settings);
      try {
        const answer = await send(app.url, "POST", path.replace("{origin}", app.url));
        return { status: answer.status, body: answer.body, resource: fake.checks[0]?.resource };
      } finally {
        await close(app.server);
      }
    }

    test("a request target in absolute form is the resource of its path, which Express routes", async () => {
      for (const target of ["{origin}/v1/search", "{origin}/v1/search?q=1", "HTTP://example.com:8443/v1/search"]) {
        const { status, body, resource } = await sendTo(target);
        assert.equal(status, 200, target);
        assert.equal(body, "found", `${target} reaches the handler of /v1/search`);
        assert.equal(resource, "POST /v1/search", target);
      }
    });

    test("an app that routes case-insensitively (Express's default) has the path folded to lower case", async () => {
      for (const path of ["/V1/Search", "/v1/SEARCH", "/V1/%53earch", "http://host/V1/Search"]) {
        const { status, body, resource } = await sendTo(path);
        if (!path.includes("%")) { // Express matches the path as sent, before decoding
          assert.equal(status, 200, path);
          assert.equal(body, "found", `${path} reaches the handler of /v1/search`);
        }
        assert.equal(resource, "POST /v1/search", path);
      }
    });

    test("an app that routes case-sensitively keeps the case; caseSensitive overrides the app", async () => {
      const sensitive = await sendTo("/V1/Search", {}, { "case sensitive routing": true });
      assert.equal(sensitive.status, 404, "Express does not route /V1/Search to /v1/search");
      assert.equal(sensitive.resource, "POST /V1/Search");
      assert.equal((await sendTo("/V1/Search", { caseSensitive: true })).resource, "POST /V1/Search");
      assert.equal((await sendTo("/V1/Search", { caseSensitive: false }, { "case sensitive routing": true })).resource, "POST /v1/search");
    });

    test("on a route, the route's pattern is checked, written as the Go SDK writes it; app.use's middleware, before routing, checks the path", async () => {
      const app = express();
      app.use(express.json());
      // Typed as Express's request and response, as the README shows:
      // req.body and res.status type-check.
      const onRoute = middleware<express.Request, express.Response>(client, {
        cost: (req) => Number(req.body?.n ?? 1),
        onLimitReached: (_req, res, d) => {
          res.status(429).json({ reason: d.reason });
        },
      });
      app.post("/repos/:owner/files/*path", onRoute, (_req, res) => {
        res.send("ok");
      });
      const router = express.Router();
      router.get("/items/:id", onRoute, (_req, res) => {
        res.send("ok");
      });
      app.use("/v2", router);
      const early = express();
      early.use(middleware(client));
      early.get("/repos/:owner", (_req, res) => {
        res.send("ok");
      });
      const servers = [createServer(app), createServer(early)];
      const [url, earlyUrl] = await Promise.all(servers.map((s) => listen(s)));
      try {
        fake.checks.length = 0;
        const headers = { "Content-Type": "application/json" };
        const posted = await fetch(`${url}/repos/octocat/files/a/b.txt`, { method: "POST", headers, body: JSON.stringify({ n: 3 }) });
        assert.equal(posted.status, 200);
        assert.equal((await send(url ?? "", "GET", "/v2/items/7")).status, 200);
        assert.equal((await send(earlyUrl ?? "", "GET", "/repos/octocat")).status, 200);
        assert.deepEqual(fake.checks.map((c) => [c.resource, c.cost]), [
          ["POST /repos/{owner}/files/{path...}", 3],
          ["GET /v2/items/{id}", 1],
          ["GET /repos/octocat", 1],
        ]);
        fake.answer = () => limited;
        const denied = await send(url ?? "", "GET", "/v2/items/7");
        assert.equal(denied.status, 429);
        assert.deepEqual(JSON.parse(denied.body), { reason: "rate_limited" });
      } finally {
        await Promise.all(servers.map((s) => close(s)));
      }
    });

    test("without Express, the case is kept unless caseSensitive is false", async () => {
      await through({}, "POST", "/V1/Search");
      await through({ caseSensitive: false }, "POST", "/V1/Search");
      assert.deepEqual(fake.checks.map((c) => c.resource), ["POST /V1/Search", "POST /v1/search"]);
    });
  });

  test("the path is cleaned before it is checked: spelling it differently does not dodge a rule", async () => {
    for (const path of ["/v1/search", "//v1//search/", "/v1/./search", "/v1/x/../search", "/v1/%73earch", "/v1/search?q=1"]) {
      await through({}, "POST", path);
    }
    assert.deepEqual(fake.checks.map((c) => c.resource), Array(6).fill("POST /v1/search"));
  });
});

describe("requestResource", () => {
  const req = (method: string, url: string, extra: ExpressLike = {}) => ({ method, url, ...extra }) as IncomingMessage & ExpressLike;
  for (const [name, r, want] of [
    ["method and path", req("GET", "/repos"), "GET /repos"],
    ["HEAD counts as GET", req("HEAD", "/repos"), "GET /repos"],
    ["query dropped", req("GET", "/repos?x=1&y=/../z"), "GET /repos"],
    ["repeated and trailing slashes", req("GET", "//repos///acme/"), "GET /repos/acme"],
    ["dot segments", req("GET", "/a/./b/../repos"), "GET /a/repos"],
    ["dot segments above the root", req("GET", "/../../repos"), "GET /repos"],
    ["percent-encoded letters", req("GET", "/%72%65pos"), "GET /repos"],
    ["encoded slashes and dots", req("GET", "/x%2F%2E%2E%2Frepos"), "GET /repos"],
    ["root", req("GET", ""), "GET /"],
    ["bad escapes stay as sent", req("GET", "/a%zz/b"), "GET /a%zz/b"],
    ["invalid UTF-8 stays escaped", req("GET", "/a%ff"), "GET /a%ff"],
    ["control characters stay escaped", req("GET", "/a%0Ab"), "GET /a%0Ab"],
    ["originalUrl before mounting", req("GET", "/acme", { originalUrl: "/repos/acme", baseUrl: "/repos" }), "GET /repos/acme"],
    ["the Express route pattern", req("GET", "/acme", { originalUrl: "/repos/acme", baseUrl: "/repos", route: { path: "/:owner" } }), "GET /repos/{owner}"],
    ["a route at the root", req("DELETE", "/keys/1", { baseUrl: "", route: { path: "/keys/:id" } }), "DELETE /keys/{id}"],
    ["parameters as Go writes them", req("GET", "/x", { route: { path: "/repos/:owner/:repo/files/*path" } }), "GET /repos/{owner}/{repo}/files/{path...}"],
    ["parameters within a segment, quoted, escaped", req("GET", "/x", { route: { path: "/f/:from-:to/:\"a b\"/c\\:d" } }), "GET /f/{from}-{to}/{a b}/c\\:d"],
    ["a mount's own route", req("GET", "/", { baseUrl: "/api", route: { path: "/" } }), "GET /api"],
    ["a regular-expression route falls back to the path", req("GET", "/r1", { route: { path: /^\/r\d$/ } }), "GET /r1"],
    ["absolute form", req("POST", "http://host/v1/search"), "POST /v1/search"],
    ["absolute form with a port, a query and an upper-case scheme", req("POST", "HTTPS://host:8443//v1/./search/?u=http://x"), "POST /v1/search"],
    ["absolute form in originalUrl", req("POST", "/search", { originalUrl: "http://host/v1/search", baseUrl: "/v1" }), "POST /v1/search"],
    ["absolute form without a path", req("GET", "http://host"), "GET /"],
    ["any scheme", req("GET", "x-y.z+1://host/repos"), "GET /repos"],
    ["not a scheme", req("GET", "/a://host/repos"), "GET /a:/host/repos"],
    ["case kept without Express", req("GET", "/Repos/Acme"), "GET /Repos/Acme"],
    ["case folded when the app routes case-insensitively", req("GET", "/Repos/Acme", { app: { get: () => undefined } }), "GET /repos/acme"],
    ["case kept when the app routes case-sensitively", req("GET", "/Repos/Acme", { app: { get: (s) => s === "case sensitive routing" } }), "GET /Repos/Acme"],
    ["the route pattern folded too", req("GET", "/Repos/Acme", { app: { get: () => false }, route: { path: "/Repos/:owner" } }), "GET /repos/{owner}"],
  ] as const) {
    test(name, () => assert.equal(requestResource(r), want));
  }

  test("caseSensitive overrides the app", () => {
    assert.equal(requestResource(req("GET", "/Repos", { app: { get: () => false } }), { caseSensitive: true }), "GET /Repos");
    assert.equal(requestResource(req("GET", "/Repos"), { caseSensitive: false }), "GET /repos");
  });

  test("a long path is cut on a character boundary", () => {
    const got = requestResource(req("GET", "/" + "é".repeat(600)));
    assert.equal(Buffer.byteLength(got), "GET ".length + 983);
    assert.ok(!got.includes("\ufffd"));
  });
});
