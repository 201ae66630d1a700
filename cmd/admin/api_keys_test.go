package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// fieldsOf returns the fields a validation error names.
func fieldsOf(err error) map[string]string {
	var e *tollgate.Error
	if errors.As(err, &e) {
		return e.Fields
	}
	return nil
}

func TestKeyRotateRequestValidate(t *testing.T) {
	tests := []struct {
		graceS int64
		ok     bool
	}{
		{0, true},
		{3600, true},
		{maxGracePeriodS, true},
		{-1, false},
		{maxGracePeriodS + 1, false},
		// time.Duration(18446744074) * time.Second wraps to about 0.29 s.
		{18446744074, false},
		{1 << 62, false},
	}
	for _, tt := range tests {
		g := tt.graceS
		req := keyRotateRequest{GracePeriodS: &g}
		err := req.Validate()
		if got := err == nil; got != tt.ok {
			t.Errorf("grace_period_s %d: Validate() = %v, want ok %v", g, err, tt.ok)
			continue
		}
		if err != nil && fieldsOf(err)["grace_period_s"] == "" {
			t.Errorf("grace_period_s %d: %v does not name grace_period_s", g, err)
		}
	}
}

// TestConcurrentKeyRotations: of many rotations of one key at once, one
// makes a new key; the others are 409. The audit log links the rotated
// key to its replacement.
func TestConcurrentKeyRotations(t *testing.T) {
	srv, op := operatorSetup(t, nil)
	ctx := context.Background()
	free, err := plans.NewStore(srv.DB).Create(ctx, plans.Plan{Name: "free"})
	testenv.Must(t, err)
	acme, err := tenants.NewStore(srv.DB).Create(ctx, "acme", free.ID)
	testenv.Must(t, err)
	_, k, err := tenants.NewStore(srv.DB).CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "ci"})
	testenv.Must(t, err)
	keyURL := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys/" + k.ID

	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses[i] = call(t, "POST", keyURL+"/rotate", op, nil).StatusCode })
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 1 || count[http.StatusConflict] != n-1 {
		t.Errorf("statuses of %d concurrent rotations: %v; want one 201 and the rest 409", n, count)
	}
	keys, err := tenants.NewStore(srv.DB).ListKeys(ctx, acme.ID)
	testenv.Must(t, err)
	if len(keys) != 2 {
		t.Fatalf("%d keys after the rotations, want 2", len(keys))
	}
	var after string
	testenv.Must(t, srv.DB.QueryRow(ctx, `SELECT after->>'replaced_by' FROM audit_log WHERE action = 'key.rotate' AND target_id = $1`,
		k.ID).Scan(&after))
	if after != keys[0].ID {
		t.Errorf("audit of the rotation: replaced_by %q, want the new key %s", after, keys[0].ID)
	}
}
