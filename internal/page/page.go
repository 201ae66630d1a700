// Package page is Tollgate's cursor pagination. A list is read in pages of
// at most Limit items; each page but the last carries an opaque cursor that
// continues after its last item. Cursors encode a keyset position (the sort
// key of the last item), so pages stay stable while rows are added, and
// they grant nothing: every query still applies its caller's filters.
package page

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strconv"

	"github.com/tollgate/tollgate"
)

// Limits of the limit parameter.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// Request is the page a caller asks for.
type Request struct {
	// Limit is the page size, 1 to MaxLimit.
	Limit int
	// Cursor is the next_cursor of the previous page; "" for the first.
	Cursor string
}

// FromQuery reads the limit and cursor query parameters. An invalid value is
// an EINVALID error naming the parameter.
func FromQuery(q url.Values) (Request, error) {
	r := Request{Limit: DefaultLimit, Cursor: q.Get("cursor")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return r, tollgate.Invalid(map[string]string{"limit": "must be an integer from 1 to " + strconv.Itoa(MaxLimit)})
		}
		r.Limit = n
	}
	return r, nil
}

// First returns the first page of size limit (DefaultLimit when ≤ 0).
func First(limit int) Request {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return Request{Limit: limit}
}

// After decodes the cursor's position into key (a pointer to the store's
// own key struct) and reports whether there was one. A cursor that does not
// decode is EINVALID naming "cursor".
func (r Request) After(key any) (bool, error) {
	if r.Cursor == "" {
		return false, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(r.Cursor)
	if err == nil {
		err = json.Unmarshal(raw, key)
	}
	if err != nil {
		return false, tollgate.Invalid(map[string]string{"cursor": "is not a cursor this list returned"})
	}
	return true, nil
}

// Fetch is the number of rows a store should read: one more than the
// limit, to learn whether another page follows.
func (r Request) Fetch() int { return r.limit() + 1 }

func (r Request) limit() int {
	if r.Limit <= 0 {
		return DefaultLimit
	}
	return r.Limit
}

// Page is one page of a list, as the admin API returns it.
type Page[T any] struct {
	Items []T `json:"items"`
	// NextCursor continues the list; nil on the last page.
	NextCursor *string `json:"next_cursor"`
}

// Make cuts rows (read with r.Fetch()) down to r's limit and, when more
// rows followed, sets the cursor to keyOf(the last item kept).
func Make[T any](r Request, rows []T, keyOf func(T) any) Page[T] {
	p := Page[T]{Items: rows}
	if p.Items == nil {
		p.Items = []T{}
	}
	if n := r.limit(); len(rows) > n {
		p.Items = rows[:n]
		raw, _ := json.Marshal(keyOf(rows[n-1]))
		c := base64.RawURLEncoding.EncodeToString(raw)
		p.NextCursor = &c
	}
	return p
}

// All reads every page of list, first to last, in pages of MaxLimit: for
// a caller that shows a whole list (the CLI), not for a request handler.
func All[T any](ctx context.Context, list func(context.Context, Request) (Page[T], error)) ([]T, error) {
	all, r := []T{}, First(MaxLimit)
	for {
		p, err := list(ctx, r)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Items...)
		if p.NextCursor == nil {
			return all, nil
		}
		r.Cursor = *p.NextCursor
	}
}
