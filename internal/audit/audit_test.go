package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestDiff(t *testing.T) {
	type obj struct {
		Name   string            `json:"name"`
		Limit  int               `json:"limit"`
		Labels map[string]string `json:"labels"`
	}
	tests := []struct {
		name          string
		before, after any
		wantB, wantA  string
	}{
		{"create", nil, obj{"a", 1, nil}, "", `{"labels":null,"limit":1,"name":"a"}`},
		{"delete", obj{"a", 1, nil}, nil, `{"labels":null,"limit":1,"name":"a"}`, ""},
		{"change", obj{"a", 1, map[string]string{"x": "1"}}, obj{"a", 2, map[string]string{"x": "1"}}, `{"limit":1}`, `{"limit":2}`},
		{"no change", obj{"a", 1, nil}, obj{"a", 1, nil}, `{}`, `{}`},
		{"field only after", map[string]any{"a": 1}, map[string]any{"a": 1, "revoked_at": "t"}, `{"revoked_at":null}`, `{"revoked_at":"t"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, a, err := audit.Diff(tt.before, tt.after)
			testenv.Must(t, err)
			if string(b) != tt.wantB || string(a) != tt.wantA {
				t.Errorf("Diff = %s, %s; want %s, %s", b, a, tt.wantB, tt.wantA)
			}
		})
	}
	if _, _, err := audit.Diff(nil, map[string]string{"secret": "tg_x"}); err == nil {
		t.Error("Diff accepted a field named secret")
	}
	if _, _, err := audit.Diff(nil, map[string]string{"Password": "x"}); err == nil {
		t.Error("Diff accepted a field named Password")
	}
	if _, _, err := audit.Diff(nil, []int{1}); err == nil {
		t.Error("Diff accepted a non-object")
	}
}

func TestRecordAndList(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	alice := audit.Actor{ID: "6f1c1f3e-0000-4000-8000-000000000001", Name: "alice@example.com"}
	tenant := "6f1c1f3e-0000-4000-8000-0000000000aa"
	changes := []struct {
		actor audit.Actor
		c     audit.Change
	}{
		{alice, audit.Change{Action: "plan.create", TargetType: "plan", TargetID: "1", After: map[string]int{"limit": 1}}},
		{alice, audit.Change{Action: "key.create", TargetType: "key", TargetID: "k1", TenantID: tenant, After: map[string]string{"name": "ci"}}},
		{audit.CLI, audit.Change{Action: "key.revoke", TargetType: "key", TargetID: "k1", TenantID: tenant,
			Before: map[string]any{"revoked_at": nil}, After: map[string]any{"revoked_at": "now"}}},
	}
	for _, c := range changes {
		_, err := audit.Record(ctx, db, c.actor, c.c)
		testenv.Must(t, err)
	}
	s := audit.NewStore(db)
	tests := []struct {
		name string
		f    audit.Filter
		want []string // actions, newest first
	}{
		{"all", audit.Filter{}, []string{"key.revoke", "key.create", "plan.create"}},
		{"actor by name", audit.Filter{Actor: "alice@example.com"}, []string{"key.create", "plan.create"}},
		{"actor by id", audit.Filter{Actor: alice.ID}, []string{"key.create", "plan.create"}},
		{"action", audit.Filter{Action: "key.revoke"}, []string{"key.revoke"}},
		{"action prefix", audit.Filter{Action: "key.*"}, []string{"key.revoke", "key.create"}},
		{"target", audit.Filter{TargetType: "key", TargetID: "k1"}, []string{"key.revoke", "key.create"}},
		{"tenant", audit.Filter{TenantID: tenant}, []string{"key.revoke", "key.create"}},
		{"future", audit.Filter{From: time.Now().Add(time.Hour)}, nil},
		{"past", audit.Filter{To: time.Now().Add(-time.Hour)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg, err := s.List(ctx, tt.f, page.First(10))
			testenv.Must(t, err)
			var got []string
			for _, e := range pg.Items {
				got = append(got, e.Action)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	pg, err := s.List(ctx, audit.Filter{}, page.Request{Limit: 2})
	testenv.Must(t, err)
	if pg.NextCursor == nil {
		t.Fatal("no cursor after a full page")
	}
	pg, err = s.List(ctx, audit.Filter{}, page.Request{Limit: 2, Cursor: *pg.NextCursor})
	testenv.Must(t, err)
	if len(pg.Items) != 1 || pg.Items[0].Action != "plan.create" || pg.NextCursor != nil {
		t.Errorf("second page = %+v", pg)
	}
	last := pg.Items[0]
	if string(last.Before) != "null" || string(last.After) != `{"limit": 1}` || last.Actor != "alice@example.com" {
		t.Errorf("entry = %+v", last)
	}
}

// TestCreateUpdateDelete: each records one entry with the record before
// and after; a failed change records nothing, and a failed read ends it
// before the change.
func TestCreateUpdateDelete(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	type record struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	describe := func(action string, before, after *record) audit.Change {
		return audit.Change{Action: action, TargetType: "record", TargetID: audit.Subject(before, after).ID,
			Before: before, After: after}
	}
	stored := record{ID: "r1", Name: "a"}
	get := func(pgx.Tx) (record, error) { return stored, nil }
	boom := errors.New("boom")

	made, err := audit.Create(ctx, db, audit.CLI, "record.create", describe, func(pgx.Tx) (record, error) { return stored, nil })
	if err != nil || made != stored {
		t.Fatalf("Create = %+v, %v", made, err)
	}
	after, err := audit.Update(ctx, db, audit.CLI, "record.update", describe, get,
		func(_ pgx.Tx, before record) (record, error) {
			before.Name = "b"
			return before, nil
		})
	if err != nil || after.Name != "b" {
		t.Fatalf("Update = %+v, %v", after, err)
	}
	testenv.Must(t, audit.Delete(ctx, db, audit.CLI, "record.delete", describe, get, func(pgx.Tx, record) error { return nil }))

	if _, err := audit.Update(ctx, db, audit.CLI, "record.fail", describe, get,
		func(pgx.Tx, record) (record, error) { return record{}, boom }); !errors.Is(err, boom) {
		t.Errorf("Update with a failing set = %v, want boom", err)
	}
	err = audit.Delete(ctx, db, audit.CLI, "record.fail", describe, func(pgx.Tx) (record, error) { return record{}, boom },
		func(pgx.Tx, record) error {
			t.Error("Delete removed a record it could not read")
			return nil
		})
	if !errors.Is(err, boom) {
		t.Errorf("Delete with a failing get = %v, want boom", err)
	}

	pg, err := audit.NewStore(db).List(ctx, audit.Filter{TargetType: "record"}, page.First(10))
	testenv.Must(t, err)
	want := []struct{ action, before, after string }{
		{"record.delete", `{"id": "r1", "name": "a"}`, "null"},
		{"record.update", `{"name": "a"}`, `{"name": "b"}`},
		{"record.create", "null", `{"id": "r1", "name": "a"}`},
	}
	if len(pg.Items) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(pg.Items), len(want), pg.Items)
	}
	for i, w := range want {
		e := pg.Items[i]
		if e.Action != w.action || string(e.Before) != w.before || string(e.After) != w.after || e.TargetID != "r1" {
			t.Errorf("entry %d = %s %s → %s (target %q); want %s %s → %s", i, e.Action, e.Before, e.After, e.TargetID,
				w.action, w.before, w.after)
		}
	}
}
