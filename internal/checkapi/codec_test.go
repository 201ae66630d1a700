package checkapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
)

// standardDecode is how check requests were read before decodeCheck:
// encoding/json through httpx.Decode.
func standardDecode(body string) (enforce.Request, error) {
	r := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body))
	var c checkRequest
	if err := httpx.Decode(r, MaxCheckBody, &c); err != nil {
		return enforce.Request{}, err
	}
	return c.toRequest(), nil
}

func sameDecoding(t *testing.T, body string) {
	t.Helper()
	want, wantErr := standardDecode(body)
	got, gotErr := decodeCheck(httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
	if (gotErr == nil) != (wantErr == nil) || got != want {
		t.Fatalf("body %q: got %+v, %v; want %+v, %v", body, got, gotErr, want, wantErr)
	}
	if wantErr != nil {
		if g, w := tollgate.ErrorCode(gotErr), tollgate.ErrorCode(wantErr); g != w {
			t.Fatalf("body %q: error code %s, want %s", body, g, w)
		}
		if g, w := fmt.Sprint(gotErr), fmt.Sprint(wantErr); g != w {
			t.Fatalf("body %q: error %s, want %s", body, g, w)
		}
		var ge, we *tollgate.Error
		if errorAs(gotErr, &ge) && errorAs(wantErr, &we) && !reflect.DeepEqual(ge.Fields, we.Fields) {
			t.Fatalf("body %q: fields %v, want %v", body, ge.Fields, we.Fields)
		}
	}
}

func errorAs(err error, target **tollgate.Error) bool {
	e, ok := err.(*tollgate.Error)
	if ok {
		*target = e
	}
	return ok
}

// TestDecodeCheckAgreesWithTheStandardDecoder: whatever the body, the
// fast reader answers what httpx.Decode answers: the same request, or the
// same error.
func TestDecodeCheckAgreesWithTheStandardDecoder(t *testing.T) {
	key := "tg_live_0123456789abcdefghijklmnopqrstuv"
	bodies := []string{
		`{"key":"` + key + `"}`,
		`{"key":"` + key + `","resource":"GET /repos"}`,
		` { "ip" : "10.1.2.3" , "resource" : "POST /v1/search", "cost": 5, "dry_run": true } ` + "\n",
		`{"ip":"10.1.2.3","cost":0}`, `{"ip":"10.1.2.3","cost":1000000000}`, `{"ip":"10.1.2.3","cost":1000000001}`,
		`{"ip":"10.1.2.3","cost":-1}`, `{"ip":"10.1.2.3","cost":1.0}`, `{"ip":"10.1.2.3","cost":1e3}`, `{"ip":"10.1.2.3","cost":01}`,
		`{"ip":"10.1.2.3","cost":"1"}`, `{"ip":"10.1.2.3","cost":null}`, `{"ip":"10.1.2.3","cost":99999999999999999999}`,
		`{"ip":"10.1.2.3","dry_run":false}`, `{"ip":"10.1.2.3","dry_run":null}`, `{"ip":"10.1.2.3","dry_run":1}`,
		`{"ip":"::ffff:10.1.2.3"}`, `{"ip":"2001:DB8::1"}`, `{"ip":"fe80::1%eth0"}`, `{"ip":" 10.1.2.3 "}`, `{"ip":"10.1.2"}`,
		`{"ip":""}`, `{"key":""}`, `{"resource":"GET /"}`, `{}`, ``, `   `, `[]`, `null`, `{"ip":"10.1.2.3"}{}`,
		`{"ip":"10.1.2.3"} x`, `{"ip":"10.1.2.3",}`, `{"ip":"10.1.2.3" "key":"x"}`, `{"ip":"10.1.2.3","ip":"10.1.2.4"}`,
		`{"IP":"10.1.2.3"}`, `{"Key":"` + key + `"}`, `{"ip":"10.1.2.3","extra":1}`, `{"ip":"10.1.2.3","resource":""}`,
		`{"ip":"10.1.2.3","resource":"GET /\u00e9"}`, `{"ip":"10.1.2.3","resource":"GET /é"}`, `{"ip":"10.1.2.3","resource":"a\tb"}`,
		`{"ip":"10.1.2.3","resource":"a\"b"}`, `{"ip":"10.1.2.3","resource":"` + strings.Repeat("r", 1024) + `"}`,
		`{"ip":"10.1.2.3","resource":"` + strings.Repeat("r", 1025) + `"}`, `{"ip":"10.1.2.3","resource":"` + strings.Repeat("r", MaxCheckBody) + `"}`,
		`{"ip":"10.1.2.3","resource":"a` + "\x7f" + `"}`, `{"ip":"10.1.2.3","resource":"a` + "\xff" + `"}`, `{"ip":"10.1.2.3"`,
		`{"key":null,"ip":"10.1.2.3"}`, `{"key":"x","ip":null}`, `{"ip":"10.1.2.3","resource":null}`, `{"ip":10}`,
		`{"ip":"10.1.2.3","auto_hold":true}`, `{"ip":"10.1.2.3","auto_hold":false,"dry_run":true}`, `{"ip":"10.1.2.3","auto_hold":"yes"}`,
	}
	for _, body := range bodies {
		sameDecoding(t, body)
	}
	// Random bodies made of the pieces above.
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{`{`, `}`, `,`, `:`, ` `, `"key"`, `"ip"`, `"resource"`, `"cost"`, `"dry_run"`, `"auto_hold"`, `"x"`, `"` + key + `"`,
		`"10.0.0.1"`, `"::1"`, `"GET /"`, `1`, `0`, `-1`, `12`, `true`, `false`, `null`, `""`, `"a b"`}
	for range 20000 {
		var b strings.Builder
		if r.IntN(4) > 0 {
			b.WriteString(`{"ip":"10.9.8.7",`)
		}
		for range r.IntN(8) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		if r.IntN(2) == 0 {
			b.WriteString(`}`)
		}
		sameDecoding(t, b.String())
	}
}

// TestAppendDecisionIsEncodingJSON: the hand-written encoder writes what
// encoding/json's Encoder writes, byte for byte.
func TestAppendDecisionIsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	strs := []string{"", "ok", "rate_limited", "hourly", `a"b`, "a<b>&c", "é", "\x01", "tenant-1", "\xff"}
	str := func() string { return strs[r.IntN(len(strs))] }
	num := func() int64 { return []int64{0, 1, -1, 42, 5000, 1 << 40, -1 << 40}[r.IntN(7)] }
	ptr := func() *int64 {
		if r.IntN(3) == 0 {
			return nil
		}
		v := num()
		return &v
	}
	for range 5000 {
		d := enforce.Decision{Allowed: r.IntN(2) == 0, Reason: str(), Tier: str(), TenantID: str(), KeyID: str(), Plan: str(),
			Limit: ptr(), Remaining: ptr(), ResetAfterMS: ptr(), RetryAfterMS: num(), DelayMS: num(), Policy: str(), Degraded: r.IntN(2) == 0}
		if r.IntN(5) > 0 {
			d.Rules = []enforce.RuleResult{}
			for range r.IntN(3) {
				d.Rules = append(d.Rules, enforce.RuleResult{Name: str(), Algorithm: limiter.Algorithm(str()), Mode: plans.Mode(str()),
					Limit: num(), WindowS: num(), Allowed: r.IntN(2) == 0, Remaining: num(), ResetAfterMS: num(), RetryAfterMS: num(),
					DelayMS: num(), WouldDeny: r.IntN(2) == 0, Degraded: r.IntN(2) == 0, Capacity: num()})
			}
		}
		if r.IntN(3) == 0 { // a hold: its ID and expiry, maybe outcomes to refund
			d.HoldID, d.HoldExpiresAt = "h"+str(), "2026-01-01T00:00:00.000Z"
			d.HoldRefundOn = [][]string{nil, {"5xx"}, {"5xx", "timeout"}}[r.IntN(3)]
		}
		if r.IntN(3) == 0 { // a lease
			d.LeaseID, d.LeaseExpiresAt, d.LeaseTTLMS = "l"+str(), "2026-01-01T00:00:01.000Z", int64(r.IntN(3))*30_000
		}
		if r.IntN(3) == 0 {
			d.Credits = &enforce.CreditsResult{Balance: num(), Drawn: num(), Overage: num()}
		}
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(&d); err != nil {
			t.Fatal(err)
		}
		if got := appendDecision(nil, &d); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("got  %s\nwant %s", got, want.Bytes())
		}
	}
}

// oldSetHeaders is SetHeaders as it was written with http.Header.Set.
func oldSetHeaders(h http.Header, d *enforce.Decision) {
	g, ok := d.Governing()
	if !ok {
		return
	}
	resetS := limiter.CeilDiv(g.ResetAfterMS, 1000)
	name := strconv.Quote(g.Name)
	h.Set("RateLimit-Policy", name+";q="+strconv.FormatInt(g.Limit, 10)+";w="+strconv.FormatInt(g.WindowS, 10))
	rl := name + ";r=" + strconv.FormatInt(g.Remaining, 10)
	if g.ResetAfterMS >= 0 {
		rl += ";t=" + strconv.FormatInt(resetS, 10)
	}
	h.Set("RateLimit", rl)
	h.Set("X-RateLimit-Limit", strconv.FormatInt(g.Limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(g.Remaining, 10))
	h.Set("X-RateLimit-Used", strconv.FormatInt(max(0, g.Capacity-g.Remaining), 10))
	if g.ResetAfterMS >= 0 {
		resetAt := limiter.CeilDiv(d.NowUS+g.ResetAfterMS*1000, 1_000_000)
		h.Set("X-RateLimit-Reset", strconv.FormatInt(resetAt, 10))
	}
	if !d.Allowed && d.RetryAfterMS > 0 {
		h.Set("Retry-After", strconv.FormatInt(limiter.CeilDiv(d.RetryAfterMS, 1000), 10))
	}
}

// TestSetHeadersAsBefore: the allocation-light headers are the ones
// http.Header.Set wrote.
func TestSetHeadersAsBefore(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		rr := enforce.RuleResult{Name: []string{"hourly", "search", `we"ird`}[r.IntN(3)], Limit: r.Int64N(10000), WindowS: r.Int64N(4000),
			Remaining: r.Int64N(100), ResetAfterMS: r.Int64N(5000) - 1, Capacity: r.Int64N(200)}
		d := &enforce.Decision{Allowed: r.IntN(2) == 0, NowUS: 1_800_000_000_000_000 + r.Int64N(1e9), RetryAfterMS: r.Int64N(3000) - 1,
			Rules: []enforce.RuleResult{rr}}
		got, want := http.Header{}, http.Header{}
		SetHeaders(got, d)
		oldSetHeaders(want, d)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decision %+v:\ngot  %v\nwant %v", d, got, want)
		}
	}
}
