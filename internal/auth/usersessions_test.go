package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestPasswordChangeAndDisableEndSessions: changing a password, ending a
// user's sessions and disabling a user all end the user's sessions, and
// only that user's.
func TestPasswordChangeAndDisableEndSessions(t *testing.T) {
	ctx := context.Background()
	s := auth.NewStore(testenv.DB(t))
	u, err := s.CreateUser(ctx, auth.NewUser{Email: "ops@example.com", Password: "long enough pw", Role: auth.RoleOperator})
	testenv.Must(t, err)
	other, err := s.CreateUser(ctx, auth.NewUser{Email: "other@example.com", Password: "long enough pw", Role: auth.RoleOperator})
	testenv.Must(t, err)
	now := time.Now()
	start := func(u auth.User) string {
		t.Helper()
		token, _, err := s.StartSession(ctx, u, secret, time.Hour, now)
		testenv.Must(t, err)
		return token
	}
	live := func(token string) bool {
		t.Helper()
		_, err := s.VerifySession(ctx, token, secret, now)
		if err != nil && err != auth.ErrNoSession {
			t.Fatal(err)
		}
		return err == nil
	}
	bystander := start(other)

	sessions := []string{start(u), start(u)}
	testenv.Must(t, s.SetPassword(ctx, u.ID, "a brand new password"))
	for i, token := range sessions {
		if live(token) {
			t.Errorf("session %d outlived the password change", i)
		}
	}
	if _, err := s.Authenticate(ctx, u.Email, "a brand new password"); err != nil {
		t.Errorf("the new password: %v", err)
	}
	if err := s.SetPassword(ctx, "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d", "a brand new password"); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("SetPassword(unknown user) = %v, want not_found", err)
	}

	sessions = []string{start(u), start(u)}
	n, err := s.EndUserSessions(ctx, u.ID)
	testenv.Must(t, err)
	if n != 2 || live(sessions[0]) || live(sessions[1]) {
		t.Errorf("EndUserSessions ended %d, sessions live: %v %v; want 2 ended", n, live(sessions[0]), live(sessions[1]))
	}
	if again := start(u); !live(again) {
		t.Error("a new session after EndUserSessions does not work")
	}

	_, err = s.EndUserSessions(ctx, u.ID) // the one above
	testenv.Must(t, err)
	sessions = []string{start(u)}
	disabled, n, err := s.DisableUser(ctx, u.ID)
	testenv.Must(t, err)
	if disabled.DisabledAt == nil || n != 1 || live(sessions[0]) {
		t.Errorf("DisableUser = %+v, %d ended; want disabled, 1 ended", disabled, n)
	}
	if _, err := s.Authenticate(ctx, u.Email, "a brand new password"); err != auth.ErrBadLogin {
		t.Errorf("a disabled user logs in: %v", err)
	}
	twice, _, err := s.DisableUser(ctx, u.ID)
	testenv.Must(t, err)
	if !twice.DisabledAt.Equal(*disabled.DisabledAt) || !twice.UpdatedAt.Equal(disabled.UpdatedAt) {
		t.Errorf("disabling twice moved disabled_at %v → %v", disabled.DisabledAt, twice.DisabledAt)
	}
	if _, _, err := s.DisableUser(ctx, "0b9f3d5e-8a44-4c1e-9d3a-5f6e7a8b9c0d"); tollgate.ErrorCode(err) != tollgate.ENOTFOUND {
		t.Errorf("DisableUser(unknown user) = %v, want not_found", err)
	}

	if !live(bystander) {
		t.Error("another user's session ended")
	}
}
