package adminapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/plans"
)

// MaxBody is the largest admin request body: room for a plan with many
// rules and tiers, small enough to refuse junk early.
const MaxBody = 64 << 10

// decodeOptional is httpx.Decode for endpoints whose body may be omitted:
// an empty body counts as {}.
func decodeOptional(r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBody))
	if err != nil {
		return tollgate.Errorf(tollgate.ETOOLARGE, "the body is larger than %d bytes", MaxBody)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return decodeValid(r, v)
}

// pathPlanID returns the {planID} path parameter; one that is not a
// number names no plan.
func pathPlanID(r *http.Request) (int64, error) {
	return plans.ParseID(chi.URLParam(r, "planID"))
}

// nullableTime is a JSON field that distinguishes absent (Set false) from
// null (Set true, Time nil).
type nullableTime struct {
	Set  bool
	Time *time.Time
}

func (n *nullableTime) UnmarshalJSON(b []byte) error {
	n.Set = true
	if string(b) == "null" {
		n.Time = nil
		return nil
	}
	var t time.Time
	if err := json.Unmarshal(b, &t); err != nil {
		return err
	}
	n.Time = &t
	return nil
}

// queryTime parses an RFC 3339 query parameter into f's problems, which
// name it also when it lies outside the years 0000 to 9999 in UTC
// (tollgate.CheckTime).
func queryTime(q url.Values, name string, f map[string]string) time.Time {
	s := q.Get(name)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		f[name] = "must be an RFC 3339 time such as 2026-01-31T00:00:00Z"
		return t
	}
	tollgate.CheckTime(f, name, t)
	return t
}
