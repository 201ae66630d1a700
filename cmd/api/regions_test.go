package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/checkapi"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestHoldsAndLeasesAnswerInAnyRegion: in a deployment of regions a hold
// or a lease lives in the Redis of the region that opened it (here each
// region's keys under a prefix of its own, as on a Redis of its own);
// a settlement, renewal or release sent to another region's check API is
// forwarded to the opening region's (TOLLGATE_REGION_CHECK_URLS) and
// answered as there. A region with no URL for the opening region answers
// not found naming it; one whose opening region does not answer, or
// answers what a check API does not (a proxy's page), unavailable; a call
// already forwarded is never forwarded on.
func TestHoldsAndLeasesAnswerInAnyRegion(t *testing.T) {
	f := newFixture(t)
	holds := f.planKey(t, tokenPlan("tokens", 100, plans.Options{}))
	leases := f.planKey(t, inflightPlan("inflight", 1, time.Hour))
	addrs := map[string]string{"us": testenv.FreeAddr(t), "eu": testenv.FreeAddr(t), "ap": testenv.FreeAddr(t)}
	region := func(name, urls string) string {
		return f.startAPI(t, map[string]string{"TOLLGATE_API_ADDR": addrs[name], "TOLLGATE_REGION": name,
			"TOLLGATE_REGIONS": "us,eu,ap", "TOLLGATE_KEY_PREFIX": f.prefix + name + ":", "TOLLGATE_REGION_CHECK_URLS": urls})
	}
	us := region("us", "eu=http://"+addrs["eu"])
	eu := region("eu", "us=http://"+addrs["us"]+"/")
	// ap knows only eu's check API, and it is wrong: nothing listens there.
	ap := region("ap", "eu=http://"+testenv.FreeAddr(t))

	r := post(t, us, f.token, `{"key":"`+holds+`","cost":60,"hold":true}`)
	id, _ := r.body["hold_id"].(string)
	if r.body["allowed"] != true || id == "" {
		t.Fatalf("hold in us: %+v", r.body)
	}
	status, body := settle(t, eu, f.token, id, 20)
	if status != http.StatusOK || body["status"] != "settled" || body["cost"] != 20.0 || body["estimate"] != 60.0 {
		t.Fatalf("us's hold settled through eu: %d %v; want 200, settled at 20 of 60", status, body)
	}
	if left := remaining(t, us, f.token, holds); left != 80 {
		t.Errorf("us after the settlement through eu: %v left, want 80", left)
	}
	if status, body := settle(t, eu, f.token, id, 20); status != http.StatusOK || body["repeated"] != true {
		t.Errorf("the settlement repeated through eu: %d %v; want 200, repeated", status, body)
	}
	if status, body := settle(t, ap, f.token, id, 20); status != http.StatusNotFound || !strings.Contains(body["detail"].(string), "region us") {
		t.Errorf("through ap, which has no URL of us: %d %v; want 404 naming region us", status, body)
	}

	r = post(t, eu, f.token, `{"key":"`+holds+`","cost":10,"hold":true}`)
	euHold, _ := r.body["hold_id"].(string)
	if status, body := settle(t, ap, f.token, euHold, 5); status != http.StatusServiceUnavailable || body["type"] == nil {
		t.Errorf("through ap, eu not answering: %d %v; want 503 problem+json", status, body)
	}
	// Another process of ap reaches eu through a proxy that answers a
	// page of its own: the caller is told to retry, not handed the page.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>502 Bad Gateway</html>")
	}))
	defer proxy.Close()
	ap2 := f.startAPI(t, map[string]string{"TOLLGATE_API_ADDR": testenv.FreeAddr(t), "TOLLGATE_REGION": "ap",
		"TOLLGATE_REGIONS": "us,eu,ap", "TOLLGATE_KEY_PREFIX": f.prefix + "ap:", "TOLLGATE_REGION_CHECK_URLS": "eu=" + proxy.URL})
	if status, body := settle(t, ap2, f.token, euHold, 5); status != http.StatusServiceUnavailable || body["type"] == nil {
		t.Errorf("through ap, eu's proxy answering 502 with a page: %d %v; want 503 problem+json", status, body)
	}

	// A call forwarded once is answered where it lands.
	req, _ := http.NewRequest(http.MethodPost, eu+"/v1/settle", strings.NewReader(`{"hold_id":"`+id+`","cost":20}`))
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set(checkapi.ForwardedHeader, "ap")
	res, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a forwarded settlement of another region's hold: %d, want 503", res.StatusCode)
	}

	r = post(t, us, f.token, `{"key":"`+leases+`","cost":1}`)
	leaseID, _ := r.body["lease_id"].(string)
	if r.body["allowed"] != true || leaseID == "" {
		t.Fatalf("lease in us: %+v", r.body)
	}
	if r := post(t, us, f.token, `{"key":"`+leases+`","cost":1}`); r.body["allowed"] != false {
		t.Fatalf("a second request in flight in us: %+v; want denied", r.body)
	}
	if status, body := lease(t, eu, f.token, "renew", leaseID); status != http.StatusOK {
		t.Errorf("us's lease renewed through eu: %d %v", status, body)
	}
	if status, body := lease(t, eu, f.token, "release", leaseID); status != http.StatusOK || body["released"] != true {
		t.Errorf("us's lease released through eu: %d %v; want released", status, body)
	}
	if r := post(t, us, f.token, `{"key":"`+leases+`","cost":1}`); r.body["allowed"] != true {
		t.Errorf("a request in us after the release through eu: %+v; want admitted", r.body)
	}
}
