package checkapi

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRefusalWarning: a gateway whose token was refused is logged at
// warn level at once, then at most once a minute with how many were
// refused meanwhile, and never with the token.
func TestRefusalWarning(t *testing.T) {
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	g := NewGatewayRefusals(reg, slog.New(slog.NewTextHandler(&out, nil)))
	const token = "eyJ-the-refused-token"
	r := httptest.NewRequest("GET", ForwardAuthPath, nil)
	r.Header.Set(HeaderServiceToken, token)
	refused := func(now time.Time) { g.Refused(r.Context(), "forward-auth", true, r.RemoteAddr, now) }
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	lines := func() []string { return strings.Split(strings.TrimSpace(out.String()), "\n") }

	refused(start)
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "refused=1") {
		t.Fatalf("after the first refusal: %q, want one warning counting 1", got)
	}
	for i := range 500 {
		refused(start.Add(time.Duration(i+1) * 100 * time.Millisecond))
	}
	if got := lines(); len(got) != 1 {
		t.Fatalf("500 refusals within the minute: %d lines, want still 1", len(got))
	}
	refused(start.Add(time.Minute + time.Second))
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "refused=501") {
		t.Fatalf("a minute later: %q, want a second warning counting 501", got)
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 502 {
		t.Errorf("the registry's counter: %v, %v; want tollgate_gateway_token_refused_total 502", mfs, err)
	}
	if strings.Contains(out.String(), token) {
		t.Errorf("the log holds the token: %s", out.String())
	}
}
