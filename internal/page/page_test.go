package page_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestFromQuery(t *testing.T) {
	tests := []struct {
		query   string
		limit   int
		invalid bool
	}{
		{"", page.DefaultLimit, false},
		{"limit=1", 1, false},
		{"limit=200", 200, false},
		{"limit=0", 0, true},
		{"limit=201", 0, true},
		{"limit=ten", 0, true},
	}
	for _, tt := range tests {
		q, _ := url.ParseQuery(tt.query)
		r, err := page.FromQuery(q)
		if tt.invalid {
			if testenv.Fields(err)["limit"] == "" {
				t.Errorf("%q: err = %v, want a problem with limit", tt.query, err)
			}
			continue
		}
		if err != nil || r.Limit != tt.limit {
			t.Errorf("%q: limit %d, err %v; want %d", tt.query, r.Limit, err, tt.limit)
		}
	}
}

func TestMakeAndAfter(t *testing.T) {
	type key struct {
		N int `json:"n"`
	}
	r := page.Request{Limit: 2}
	rows := []int{1, 2, 3} // read with r.Fetch() = 3: one more page follows
	p := page.Make(r, rows, func(n int) any { return key{n} })
	if len(p.Items) != 2 || p.NextCursor == nil {
		t.Fatalf("page = %+v", p)
	}
	var k key
	ok, err := page.Request{Limit: 2, Cursor: *p.NextCursor}.After(&k)
	if !ok || err != nil || k.N != 2 {
		t.Errorf("After = %v %v %+v, want the last item kept (2)", ok, err, k)
	}
	last := page.Make(r, rows[:2], func(n int) any { return key{n} })
	if last.NextCursor != nil {
		t.Error("a short page has a cursor")
	}
	if empty := page.Make[int](r, nil, nil); empty.Items == nil {
		t.Error("an empty page's items are null, want []")
	}
	if ok, err := (page.Request{}).After(&k); ok || err != nil {
		t.Errorf("no cursor: %v %v", ok, err)
	}
	if _, err := (page.Request{Cursor: "%%%"}).After(&k); err == nil {
		t.Error("a garbage cursor decoded")
	}
}

// TestAllReadsEveryPage: All follows the cursors to the last page, and
// stops at an error.
func TestAllReadsEveryPage(t *testing.T) {
	rows := make([]int, 2*page.MaxLimit+3)
	for i := range rows {
		rows[i] = i
	}
	calls := 0
	list := func(_ context.Context, r page.Request) (page.Page[int], error) {
		calls++
		from := 0
		if r.Cursor != "" {
			var after int
			if _, err := r.After(&after); err != nil {
				return page.Page[int]{}, err
			}
			from = after + 1
		}
		end := min(len(rows), from+r.Fetch())
		return page.Make(r, rows[from:end], func(n int) any { return n }), nil
	}
	got, err := page.All(context.Background(), list)
	if err != nil || len(got) != len(rows) || got[len(got)-1] != len(rows)-1 || calls != 3 {
		t.Errorf("All = %d rows (last %v), %v in %d calls; want %d rows in 3 calls", len(got), got[len(got)-1:], err, calls, len(rows))
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("row %d = %d, want %d (in order, once each)", i, n, i)
		}
	}
	boom := errors.New("boom")
	if _, err := page.All(context.Background(), func(context.Context, page.Request) (page.Page[int], error) {
		return page.Page[int]{}, boom
	}); !errors.Is(err, boom) {
		t.Errorf("All on a failing list: %v, want %v", err, boom)
	}
}
