package auth_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestPasswordHash(t *testing.T) {
	ctx := context.Background()
	h, err := auth.HashPassword(ctx, "correct horse battery")
	testenv.Must(t, err)
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Errorf("hash %q is not a PHC argon2id string with the expected parameters", h)
	}
	if ok, err := auth.CheckPassword(ctx, h, "correct horse battery"); !ok || err != nil {
		t.Errorf("CheckPassword(right) = %v, %v", ok, err)
	}
	if ok, err := auth.CheckPassword(ctx, h, "correct horse batterY"); ok || err != nil {
		t.Errorf("CheckPassword(wrong) = %v, %v", ok, err)
	}
	h2, _ := auth.HashPassword(ctx, "correct horse battery")
	if h == h2 {
		t.Error("two hashes of one password are equal: the salt is not random")
	}
	if ok, _ := auth.CheckPassword(ctx, "$2a$10$notargon", "x"); ok {
		t.Error("CheckPassword accepted a foreign hash")
	}
}

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestUsersAndSessions(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	s := auth.NewStore(db)
	p, err := plans.NewStore(db).Create(ctx, plans.Plan{Name: "free"})
	testenv.Must(t, err)
	tenant, err := tenants.NewStore(db).Create(ctx, "acme", p.ID)
	testenv.Must(t, err)

	invalid := []struct {
		nu    auth.NewUser
		field string
	}{
		{auth.NewUser{Email: "nope", Password: "long enough pw", Role: auth.RoleOperator}, "email"},
		{auth.NewUser{Email: "a@example.com", Password: "short", Role: auth.RoleOperator}, "password"},
		{auth.NewUser{Email: "a@example.com", Password: "long enough pw", Role: "root"}, "role"},
		{auth.NewUser{Email: "a@example.com", Password: "long enough pw", Role: auth.RoleTenantAdmin}, "tenant_id"},
		{auth.NewUser{Email: "a@example.com", Password: "long enough pw", Role: auth.RoleOperator, TenantID: tenant.ID}, "tenant_id"},
		{auth.NewUser{Email: "a@example.com", Password: "long enough pw", Role: auth.RoleTenantViewer, TenantID: "00000000-0000-0000-0000-000000000000"}, "tenant_id"},
	}
	for _, tt := range invalid {
		_, err := s.CreateUser(ctx, tt.nu)
		if testenv.Fields(err)[tt.field] == "" {
			t.Errorf("CreateUser(%+v) = %v, want a problem with %s", tt.nu, err, tt.field)
		}
	}

	u, err := s.CreateUser(ctx, auth.NewUser{Email: " Ops@Example.com ", Password: "long enough pw", Role: auth.RoleOperator})
	testenv.Must(t, err)
	if u.Email != "ops@example.com" || u.TenantID != "" {
		t.Errorf("user = %+v", u)
	}
	if _, err := s.CreateUser(ctx, auth.NewUser{Email: "ops@example.com", Password: "long enough pw", Role: auth.RoleOperator}); tollgate.ErrorCode(err) != tollgate.ECONFLICT {
		t.Errorf("duplicate email = %v, want conflict", err)
	}
	ta, err := s.CreateUser(ctx, auth.NewUser{Email: "admin@acme.example", Password: "long enough pw", Role: auth.RoleTenantAdmin, TenantID: tenant.ID})
	testenv.Must(t, err)
	if ta.TenantID != tenant.ID {
		t.Errorf("tenant admin's tenant = %q, want %q", ta.TenantID, tenant.ID)
	}

	if _, err := s.Authenticate(ctx, "OPS@example.com", "long enough pw"); err != nil {
		t.Errorf("Authenticate(right) = %v", err)
	}
	for _, bad := range [][2]string{{"ops@example.com", "wrong password"}, {"nobody@example.com", "long enough pw"}} {
		if _, err := s.Authenticate(ctx, bad[0], bad[1]); err != auth.ErrBadLogin {
			t.Errorf("Authenticate(%s) = %v, want ErrBadLogin", bad[0], err)
		}
	}

	now := time.Now()
	token, sess, err := s.StartSession(ctx, u, secret, time.Hour, now)
	testenv.Must(t, err)
	got, err := s.VerifySession(ctx, token, secret, now)
	testenv.Must(t, err)
	if got.ID != sess.ID || got.User.ID != u.ID || got.User.Role != auth.RoleOperator {
		t.Errorf("VerifySession = %+v, want session %s of %s", got, sess.ID, u.ID)
	}
	if _, err := s.VerifySession(ctx, token, secret, now.Add(2*time.Hour)); err != auth.ErrNoSession {
		t.Errorf("expired session = %v, want ErrNoSession", err)
	}
	if _, err := s.VerifySession(ctx, token, []byte("another secret of thirty-two bytes!"), now); err != auth.ErrNoSession {
		t.Errorf("other secret = %v, want ErrNoSession", err)
	}
	testenv.Must(t, s.EndSession(ctx, sess.ID))
	if _, err := s.VerifySession(ctx, token, secret, now); err != auth.ErrNoSession {
		t.Errorf("ended session = %v, want ErrNoSession", err)
	}
}

// TestParseSessionTokenPinsEverything: only HS256 tokens for the admin
// audience from our issuer are accepted.
func TestParseSessionTokenPinsEverything(t *testing.T) {
	now := time.Now()
	claims := func() jwt.RegisteredClaims {
		return jwt.RegisteredClaims{Issuer: auth.Issuer, Subject: "u", ID: "s", Audience: jwt.ClaimStrings{auth.AdminAudience},
			IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))}
	}
	sign := func(m jwt.SigningMethod, c jwt.RegisteredClaims, key any) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		testenv.Must(t, err)
		return s
	}
	good := sign(jwt.SigningMethodHS256, claims(), secret)
	if _, _, err := auth.ParseSessionToken(good, secret, now); err != nil {
		t.Fatalf("good token: %v", err)
	}
	wrongAud, noExp, wrongIss := claims(), claims(), claims()
	wrongAud.Audience = jwt.ClaimStrings{auth.CheckAudience}
	noExp.ExpiresAt = nil
	wrongIss.Issuer = "someone-else"
	bad := map[string]string{
		"HS512":          sign(jwt.SigningMethodHS512, claims(), secret),
		"none":           sign(jwt.SigningMethodNone, claims(), jwt.UnsafeAllowNoneSignatureType),
		"check audience": sign(jwt.SigningMethodHS256, wrongAud, secret),
		"no expiry":      sign(jwt.SigningMethodHS256, noExp, secret),
		"other issuer":   sign(jwt.SigningMethodHS256, wrongIss, secret),
		"garbage":        "not.a.token",
	}
	for name, tok := range bad {
		if _, _, err := auth.ParseSessionToken(tok, secret, now); err != auth.ErrNoSession {
			t.Errorf("%s: err = %v, want ErrNoSession", name, err)
		}
	}
}

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
