package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"

	"github.com/tollgate/tollgate/client"
)

// A service protected by the middleware: anonymous callers of the fake
// check API may make 2 requests, then wait 30 s.
func Example() {
	checkAPI := httptest.NewServer(newFakeCheck("service-token", 2, 30_000))
	defer checkAPI.Close()

	tg, err := client.New(checkAPI.URL, "service-token", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := client.DecisionFrom(r.Context())
		fmt.Fprintf(w, "hello, %s caller", d.Tier)
	})
	protected := tg.Middleware(client.MiddlewareOptions{})(hello)

	for range 3 {
		rec := httptest.NewRecorder()
		protected.ServeHTTP(rec, httptest.NewRequest("GET", "/hello", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"), strings.TrimSpace(rec.Body.String()))
	}
	// Output:
	// 200 "hourly";r=1;t=1800  hello, anonymous caller
	// 200 "hourly";r=0;t=1800  hello, anonymous caller
	// 429 "hourly";r=0;t=1800 30 {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"rate limit exceeded; retry after 30 s","code":"rate_limited"}
}

func ExampleClient_Check() {
	checkAPI := httptest.NewServer(newFakeCheck("service-token", 5000, 1000))
	defer checkAPI.Close()
	tg, err := client.New(checkAPI.URL, "service-token", client.Options{})
	if err != nil {
		log.Fatal(err)
	}

	d, err := tg.Check(context.Background(), client.CheckRequest{
		Key: "tg_4fT9aQ2x0000000000000000000000000000", IP: "203.0.113.7", Resource: "GET /repos", Cost: 3,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Reason, d.Tier, d.Plan)
	fmt.Printf("%s: %d of %d left\n", d.Policy, d.Remaining, d.Limit)
	fmt.Println(d.Header.Get("X-RateLimit-Used"))
	// Output:
	// true ok authenticated pro
	// hourly: 4997 of 5000 left
	// 3
}

// A request denied with a wait is denied again locally, without a round
// trip, until the wait has passed.
func ExampleClient_Check_remembered() {
	fake := newFakeCheck("service-token", 1, 60_000)
	checkAPI := httptest.NewServer(fake)
	defer checkAPI.Close()
	tg, err := client.New(checkAPI.URL, "service-token", client.Options{})
	if err != nil {
		log.Fatal(err)
	}

	req := client.CheckRequest{IP: "203.0.113.7", Resource: "POST /search"}
	for range 4 {
		d, err := tg.Check(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed=%v remembered=%v checks sent=%d\n", d.Allowed, d.Remembered, fake.Calls())
	}
	// Output:
	// allowed=true remembered=false checks sent=1
	// allowed=false remembered=false checks sent=2
	// allowed=false remembered=true checks sent=2
	// allowed=false remembered=true checks sent=2
}

// When the check API cannot be reached, the FailMode decides.
func ExampleFailMode() {
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // nothing listens at its address any more

	for _, mode := range []client.FailMode{client.FailOpen, client.FailClosed} {
		tg, err := client.New(down.URL, "service-token", client.Options{FailMode: mode})
		if err != nil {
			log.Fatal(err)
		}
		d, err := tg.Check(context.Background(), client.CheckRequest{IP: "203.0.113.7"})
		fmt.Printf("fail %s: allowed=%v reason=%s degraded=%v cause reported=%v err=%v\n",
			mode, d.Allowed, d.Reason, d.Degraded, d.Err != nil, err)
	}
	// Output:
	// fail open: allowed=true reason=ok degraded=true cause reported=true err=<nil>
	// fail closed: allowed=false reason=unavailable degraded=true cause reported=true err=<nil>
}

// The server's refusals are a *ProblemError naming the invalid fields.
func ExampleProblemError() {
	checkAPI := httptest.NewServer(newFakeCheck("service-token", 10, 1000))
	defer checkAPI.Close()
	tg, err := client.New(checkAPI.URL, "service-token", client.Options{})
	if err != nil {
		log.Fatal(err)
	}

	_, err = tg.Check(context.Background(), client.CheckRequest{Resource: "GET /repos"}) // neither key nor ip
	var problem *client.ProblemError
	if errors.As(err, &problem) {
		fmt.Println(problem.Status, problem.Code, problem.Errors["ip"])
	}
	fmt.Println(err)
	// Output:
	// 422 invalid is required when key is absent
	// tollgate: check: 422 invalid: the request has invalid fields: ip is required when key is absent
}

// Behind a load balancer at 10.0.0.0/8, the caller is the address the
// balancer saw, not one a client wrote into X-Forwarded-For.
func ExampleForwardedFor() {
	ip := client.ForwardedFor(netip.MustParsePrefix("10.0.0.0/8"))

	viaBalancer := httptest.NewRequest("GET", "/", nil)
	viaBalancer.RemoteAddr = "10.1.2.3:40000"
	viaBalancer.Header.Set("X-Forwarded-For", "192.0.2.66, 203.0.113.7")
	fmt.Println(ip(viaBalancer))

	direct := httptest.NewRequest("GET", "/", nil)
	direct.RemoteAddr = "198.51.100.9:50000"
	direct.Header.Set("X-Forwarded-For", "192.0.2.66")
	fmt.Println(ip(direct))
	// Output:
	// 203.0.113.7
	// 198.51.100.9
}

func ExampleAdminClient() {
	adminAPI := httptest.NewServer(fakeAdmin())
	defer adminAPI.Close()
	ctx := context.Background()

	admin, err := client.NewAdmin(adminAPI.URL, client.AdminOptions{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := admin.Login(ctx, "ops@example.com", "correct horse"); err != nil {
		log.Fatal(err)
	}
	tenants, err := admin.ListTenants(ctx, client.TenantQuery{Search: "acme"})
	if err != nil {
		log.Fatal(err)
	}
	acme := tenants.Items[0]
	issued, err := admin.IssueKey(ctx, acme.ID, client.KeyInput{Name: "acme prod"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(acme.Name, issued.Key.Name, issued.Key.Prefix, len(issued.Secret))

	_, err = admin.IssueKey(ctx, acme.ID, client.KeyInput{Name: strings.Repeat("x", 201)})
	fmt.Println(err)
	// Output:
	// acme acme prod tg_4fT9aQ2x 39
	// tollgate: issue key for tenant 0b0e7c1e-0000-4000-8000-000000000001: 422 invalid: the request has invalid fields: name must be at most 200 characters
}
