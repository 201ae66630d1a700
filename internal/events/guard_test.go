package events_test

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestGuardRefusesPrivateURLs: URLs pointing to loopback, private or
// link-local addresses are refused when an endpoint is made, unless the
// guard allows them.
func TestGuardRefusesPrivateURLs(t *testing.T) {
	ctx := context.Background()
	strict := events.Guard{}
	for _, u := range []string{
		"http://127.0.0.1/hook", "http://[::1]:8080/", "http://10.1.2.3/", "http://192.168.0.1/", "http://172.16.5.4/",
		"http://169.254.169.254/latest/meta-data", "http://[fe80::1]/", "http://0.0.0.0/", "http://100.64.0.1/",
		"http://[::ffff:127.0.0.1]/", "http://localhost:9000/", "http://api.localhost/",
		"ftp://hooks.example.com/", "https://user:pw@hooks.example.com/", "not a url", "https:///path",
	} {
		if why := strict.CheckURL(ctx, u); why == "" {
			t.Errorf("CheckURL(%q) accepted it", u)
		}
	}
	for _, u := range []string{"https://hooks.example.com/tollgate", "https://8.8.8.8/hook"} {
		if why := strict.CheckURL(ctx, u); why != "" {
			t.Errorf("CheckURL(%q) = %q, want it accepted", u, why)
		}
	}
	if why := (events.Guard{AllowPrivate: true}).CheckURL(ctx, "http://127.0.0.1:9/"); why != "" {
		t.Errorf("AllowPrivate: CheckURL(loopback) = %q, want it accepted", why)
	}
	for _, allowed := range []struct {
		name        string
		addr        netip.AddrPort
		urls        map[string]bool // accepted or not
		dialRefused string
	}{
		// An allowed address, and no other private one (nor another form
		// of it that is another address).
		{"127.0.0.1", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0),
			map[string]bool{"http://127.0.0.1:8082/": true, "http://[::ffff:127.0.0.1]/": true,
				"http://127.0.0.2/": false, "http://10.0.0.1/": false, "http://[::1]/": false},
			"10.0.0.1:80"},
		// An allowed address and port: that port only, so that an endpoint
		// cannot reach the other services on loopback (the api's metrics,
		// the admin API) and read their answers in the delivery log.
		{"127.0.0.1:8082", netip.MustParseAddrPort("127.0.0.1:8082"),
			map[string]bool{"http://127.0.0.1:8082/hook": true, "http://[::ffff:127.0.0.1]:8082/": true,
				"http://127.0.0.1:8080/metrics": false, "http://127.0.0.1/": false, "https://127.0.0.1/": false, "http://127.0.0.1:0/": false},
			"127.0.0.1:8081"},
	} {
		g := events.Guard{AllowAddrs: []netip.AddrPort{allowed.addr}}
		for u, ok := range allowed.urls {
			if why := g.CheckURL(ctx, u); (why == "") != ok {
				t.Errorf("AllowAddrs %s: CheckURL(%q) = %q, want accepted %v", allowed.name, u, why, ok)
			}
		}
		if err := g.Dialer(time.Second).Control("tcp", allowed.dialRefused, nil); err == nil {
			t.Errorf("AllowAddrs %s: the dialer lets %s through", allowed.name, allowed.dialRefused)
		}
		if err := g.Dialer(time.Second).Control("tcp", "127.0.0.1:8082", nil); err != nil {
			t.Errorf("AllowAddrs %s: the dialer refuses 127.0.0.1:8082: %v", allowed.name, err)
		}
	}

	db, acme, _ := setup(t)
	_, err := events.NewOps(db, nil, strict).CreateEndpoint(ctx, audit.CLI, acme.ID, events.EndpointInput{URL: "http://127.0.0.1:8080/"})
	if testenv.Fields(err)["url"] == "" {
		t.Errorf("CreateEndpoint(loopback) = %v, want the url field refused", err)
	}
}

// TestGuardRefusalNamesTheSetting: a refused address is named with its
// port in a sentence that names the setting that allows it, when an
// endpoint is made and when it is dialled.
func TestGuardRefusalNamesTheSetting(t *testing.T) {
	want := "must not point to 127.0.0.1:8082, a loopback, private or link-local address that TOLLGATE_WEBHOOK_ALLOW_ADDRS does not list"
	if got := (events.Guard{}).CheckURL(context.Background(), "http://127.0.0.1:8082/mine"); got != want {
		t.Errorf("CheckURL = %q, want %q", got, want)
	}
	err := events.Guard{}.Dialer(time.Second).Control("tcp", "[::1]:8081", nil)
	if want := "refused to connect to [::1]:8081, a loopback, private or link-local address that TOLLGATE_WEBHOOK_ALLOW_ADDRS does not list"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("dialling [::1]:8081: %v, want %q", err, want)
	}
}

// TestGuardRefusesAtSendTime: an endpoint whose address turns private
// after it was made (DNS rebinding) is refused when dialled; the attempt
// records why and nothing reaches the receiver.
func TestGuardRefusesAtSendTime(t *testing.T) {
	db, acme, _ := setup(t)
	rcv := testenv.NewReceiver(t, nil)
	// Made while private addresses were allowed, sent by a strict deliverer.
	endpoint(t, events.NewOps(db, nil, allowPrivate), acme.ID, rcv.URL, events.EndpointInput{})
	emit(t, db, events.KeyRevoked, acme.ID, time.Time{})
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Guard: events.Guard{}})
	n, err := d.DeliverDue(context.Background())
	testenv.Must(t, err)
	if n != 1 || len(rcv.Requests()) != 0 {
		t.Fatalf("attempts %d, requests received %d; want 1 attempt refused before connecting", n, len(rcv.Requests()))
	}
	var msg string
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT error FROM webhook_attempts`).Scan(&msg))
	if !strings.Contains(msg, "refused to connect") {
		t.Errorf("attempt error %q, want the refusal", msg)
	}
}

// TestTenantEndpointsIsolated: a tenant's endpoint receives its own
// tenant's events only; an operator's endpoint its chosen tenants'; a
// tenant cannot replay another tenant's event, nor reach another's
// endpoint.
func TestTenantEndpointsIsolated(t *testing.T) {
	db, acme, globex := setup(t)
	ctx := context.Background()
	clk := newClock()
	acmeRcv, globexRcv, opRcv := testenv.NewReceiver(t, nil), testenv.NewReceiver(t, nil), testenv.NewReceiver(t, nil)
	ops := events.NewOps(db, clk.Now, allowPrivate)
	acmeEP := endpoint(t, ops, acme.ID, acmeRcv.URL, events.EndpointInput{})
	globexEP := endpoint(t, ops, globex.ID, globexRcv.URL, events.EndpointInput{})
	endpoint(t, ops, "", opRcv.URL, events.EndpointInput{TenantIDs: []string{globex.ID}})
	a := emit(t, db, events.KeyRevoked, acme.ID, clk.Now())
	g := emit(t, db, events.KeyRevoked, globex.ID, clk.Now())
	emit(t, db, events.StatementClosed, "", clk.Now()) // global: to operators' all-tenant endpoints only
	drain(t, db, events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate}), clk, clk.Now().Add(time.Hour))
	if got := acmeRcv.IDs(); len(got) != 1 || got[0] != a.ID {
		t.Errorf("acme's endpoint got %v, want [%s]", got, a.ID)
	}
	if got := globexRcv.IDs(); len(got) != 1 || got[0] != g.ID {
		t.Errorf("globex's endpoint got %v, want [%s]", got, g.ID)
	}
	if got := opRcv.IDs(); len(got) != 1 || got[0] != g.ID {
		t.Errorf("the operator's globex-only endpoint got %v, want [%s]", got, g.ID)
	}
	if _, err := ops.Replay(ctx, audit.CLI, acme.ID, acmeEP.Endpoint.ID, events.ReplayInput{EventID: g.ID}); err == nil {
		t.Error("acme replayed globex's event to its endpoint")
	}
	if _, err := ops.Disable(ctx, audit.CLI, acme.ID, globexEP.Endpoint.ID); err == nil {
		t.Error("acme's scope disabled globex's endpoint")
	}
	if _, err := events.NewStore(db).Deliveries(ctx, acme.ID, globexEP.Endpoint.ID, pageFirst()); err == nil {
		t.Error("acme's scope read globex's deliveries")
	}
	page, err := events.NewStore(db).Events(ctx, acme.ID, "", pageFirst())
	testenv.Must(t, err)
	for _, e := range page.Items {
		if e.TenantID != acme.ID {
			t.Errorf("acme's events list holds %s of tenant %q", e.ID, e.TenantID)
		}
	}
	res, err := ops.Replay(ctx, audit.CLI, acme.ID, acmeEP.Endpoint.ID,
		events.ReplayInput{From: ptr(clk.Now().Add(-24 * time.Hour)), To: ptr(clk.Now().Add(24 * time.Hour))})
	testenv.Must(t, err)
	if res.Deliveries != 1 {
		t.Errorf("replaying acme's day made %d deliveries, want 1", res.Deliveries)
	}
}

// TestTenantEndpointsListedInPages: a tenant's endpoints list pages
// newest first, each of its endpoints once and no other tenant's, and
// refuses a cursor no list returned.
func TestTenantEndpointsListedInPages(t *testing.T) {
	db, acme, globex := setup(t)
	ctx := context.Background()
	ops := events.NewOps(db, nil, allowPrivate)
	endpoint(t, ops, globex.ID, "http://127.0.0.1:9/globex", events.EndpointInput{})
	var want []string
	for _, path := range []string{"/a", "/b", "/c", "/d", "/e"} {
		want = append([]string{endpoint(t, ops, acme.ID, "http://127.0.0.1:9"+path, events.EndpointInput{}).Endpoint.ID}, want...)
	}
	es := events.NewStore(db)
	var got []string
	pr := page.Request{Limit: 2}
	for {
		pg, err := es.Endpoints(ctx, acme.ID, pr)
		testenv.Must(t, err)
		for _, e := range pg.Items {
			got = append(got, e.ID)
		}
		if pg.NextCursor == nil {
			break
		}
		pr.Cursor = *pg.NextCursor
	}
	if len(got) != len(want) {
		t.Fatalf("paged %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("paged %v, want %v (newest first)", got, want)
			break
		}
	}
	if _, err := es.Endpoints(ctx, acme.ID, page.Request{Limit: 2, Cursor: "eyJ0IjoiMjAyNi0wMS0wMVQwMDowMDowMFoiLCJpIjoieCJ9"}); testenv.Fields(err)["cursor"] == "" {
		t.Errorf("a cursor naming no endpoint: %v, want the cursor refused", err)
	}
}

// TestCommitToFirstAttempt measures, with a running deliverer woken by
// notifications, the time from an event's commit to its first attempt
// reaching the receiver, over many events; the 99th percentile must be
// at most a second.
func TestCommitToFirstAttempt(t *testing.T) {
	db, acme, _ := setup(t)
	rcv := testenv.NewReceiver(t, nil)
	endpoint(t, events.NewOps(db, nil, allowPrivate), acme.ID, rcv.URL, events.EndpointInput{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Guard: allowPrivate, Poll: time.Second})
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(ctx) }()
	testenv.WaitListening(t, db, "tollgate_webhooks")
	const n = 400
	committed := map[string]time.Time{}
	for i := range n {
		ev := emit(t, db, events.KeyRevoked, acme.ID, time.Time{})
		committed[ev.ID] = time.Now()
		// Bursts, with pauses: the next burst is committed once this
		// one is delivered, so that each finds the deliverer idle and
		// waiting for a notification to wake it.
		if i%20 == 0 {
			testenv.WaitFor(t, 30*time.Second, "the burst delivered", func() bool { return len(rcv.Requests()) > i })
		}
	}
	testenv.Eventually(t, time.Now(), 30*time.Second, "every event delivered", func() (bool, string) {
		got := len(rcv.Requests())
		return got >= n, strconv.Itoa(got)
	})
	cancel()
	<-done
	var lat []time.Duration
	for _, r := range rcv.Requests() {
		lat = append(lat, r.At.Sub(committed[r.ID]))
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("commit to first attempt over %d events: p50 %v, p99 %v, max %v", len(lat), p50, p99, lat[len(lat)-1])
	if p99 > time.Second {
		t.Errorf("p99 from commit to first attempt %v, want ≤ 1s", p99)
	}
}

func pageFirst() page.Request { return page.First(100) }

func ptr[T any](v T) *T { return &v }

// TestGuardEmbeddedIPv4: an IPv6 address that carries an IPv4 address
// (NAT64, 6to4, Teredo) is judged by the IPv4 address it reaches, and
// local-use NAT64 is refused whole, when an endpoint is made and when it
// is dialled.
func TestGuardEmbeddedIPv4(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"64:ff9b::a00:1", false},            // NAT64 of 10.0.0.1
		{"64:ff9b::a9fe:a9fe", false},        // NAT64 of 169.254.169.254
		{"64:ff9b::7f00:1", false},           // NAT64 of 127.0.0.1
		{"64:ff9b::6440:1", false},           // NAT64 of 100.64.0.1
		{"64:ff9b::808:808", true},           // NAT64 of 8.8.8.8
		{"64:ff9b:1::808:808", false},        // local-use NAT64: any
		{"64:ff9b:1:abcd::1", false},         // local-use NAT64: any
		{"2002:a00:1::1", false},             // 6to4 of 10.0.0.1
		{"2002:c0a8:101::", false},           // 6to4 of 192.168.1.1
		{"2002:808:808::1", true},            // 6to4 of 8.8.8.8
		{"2001:0:a00:1::808:808", false},     // Teredo, server 10.0.0.1
		{"2001:0:808:808::f5ff:fffe", false}, // Teredo, client 10.0.0.1
		{"2001:0:808:808::f7f7:f7f7", true},  // Teredo, client 8.8.8.8
		{"2001:4860:4860::8888", true},       // not Teredo (2001:4860::/32)
		{"2606:4700::1111", true},
	} {
		t.Run(c.host, func(t *testing.T) {
			why := events.Guard{}.CheckURL(ctx, "http://["+c.host+"]/hook")
			if got := why == ""; got != c.ok {
				t.Errorf("CheckURL([%s]) = %q, want accepted %v", c.host, why, c.ok)
			}
			err := events.Guard{}.Dialer(time.Second).Control("tcp6", "["+c.host+"]:443", nil)
			if got := err == nil; got != c.ok {
				t.Errorf("dial [%s]:443 = %v, want allowed %v", c.host, err, c.ok)
			}
			addr := netip.MustParseAddr(c.host)
			allowed := events.Guard{AllowAddrs: []netip.AddrPort{netip.AddrPortFrom(addr, 0)}}
			if why := allowed.CheckURL(ctx, "http://["+c.host+"]/hook"); why != "" {
				t.Errorf("AllowAddrs %s: CheckURL = %q, want accepted", c.host, why)
			}
		})
	}
}
