package client

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProblemError is an error answer of a Tollgate server: an RFC 9457
// application/problem+json body, or the status alone when the body was not
// one. Use errors.As to get it from an error the client returned.
type ProblemError struct {
	// Status is the HTTP status of the answer.
	Status int
	Type   string
	Title  string
	Detail string
	// Code is Tollgate's error code: invalid, malformed, not_found,
	// conflict, unauthorized, forbidden, too_large, rate_limited, internal,
	// method_not_allowed, unavailable; "" when the body was not a problem.
	Code string
	// Errors names each invalid field and what is wrong with it, e.g.
	// "ip" → "must be an IPv4 or IPv6 address".
	Errors map[string]string
	// RetryAfter is the answer's Retry-After, when it had one.
	RetryAfter time.Duration
}

// Error describes the problem, naming the invalid fields in order, e.g.
// "422 invalid: the request has invalid fields: ip must be an IPv4 or IPv6
// address".
func (e *ProblemError) Error() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(e.Status))
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	} else if t := http.StatusText(e.Status); t != "" {
		b.WriteString(" " + t)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if len(e.Errors) > 0 {
		fields := make([]string, 0, len(e.Errors))
		for f := range e.Errors {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		for i, f := range fields {
			if i == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString(", ")
			}
			b.WriteString(f + " " + e.Errors[f])
		}
	}
	return b.String()
}

// outage reports whether p means that the check API could not be asked:
// a 5xx, or a 408 or 429, which only something in between sends (the
// check API never answers a check with either). Every other status is
// an answer not to let a request through on: the check API's refusal
// (400, 401, 413, 422), or something in between refusing the check for
// it — a WAF's 403 on a body with a key that looks like an attack, a
// 404 or 405 of a route that is not the check API's. A fail mode open
// on those would let whoever provokes them past every limit.
func (p *ProblemError) outage() bool {
	return p.Status >= 500 || p.Status == http.StatusRequestTimeout || p.Status == http.StatusTooManyRequests
}

// maxProblemBody bounds how much of an error answer is read.
const maxProblemBody = 64 << 10

// readProblem turns a non-2xx answer into a *ProblemError. A body that is
// not problem JSON is kept (shortened) as the detail, so that an answer
// from a proxy in between still says something.
func readProblem(resp *http.Response) *ProblemError {
	p := &ProblemError{Status: resp.StatusCode}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType == "application/problem+json" || mediaType == "application/json" {
		var body struct {
			Type   string            `json:"type"`
			Title  string            `json:"title"`
			Status int               `json:"status"`
			Detail string            `json:"detail"`
			Code   string            `json:"code"`
			Errors map[string]string `json:"errors"`
		}
		if json.Unmarshal(raw, &body) == nil {
			p.Type, p.Title, p.Detail, p.Code, p.Errors = body.Type, body.Title, body.Detail, body.Code, body.Errors
			return p
		}
	}
	p.Title = http.StatusText(resp.StatusCode)
	detail := strings.TrimSpace(string(raw))
	if len(detail) > 200 {
		detail = strings.ToValidUTF8(detail[:200], "") + "…"
	}
	p.Detail = detail
	return p
}
