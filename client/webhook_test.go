package client_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

func TestVerifyWebhook(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another key, another key, another"))
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1","type":"key.revoked"}`)
	sign := func(k []byte, ts int64, b []byte) string {
		m := hmac.New(sha256.New, k)
		m.Write([]byte("evt_1." + strconv.FormatInt(ts, 10) + "."))
		m.Write(b)
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	headers := func(ts int64, sig string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", "evt_1")
		h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		h.Set("webhook-signature", sig)
		return h
	}
	otherKey, _ := base64.StdEncoding.DecodeString(other[len("whsec_"):])
	tests := []struct {
		name   string
		secret string
		h      http.Header
		body   []byte
		ok     bool
	}{
		{"signed", secret, headers(now.Unix(), sign(key, now.Unix(), body)), body, true},
		{"two signatures, rotation", secret, headers(now.Unix(), sign(otherKey, now.Unix(), body)+" "+sign(key, now.Unix(), body)), body, true},
		{"4 minutes old", secret, headers(now.Unix()-240, sign(key, now.Unix()-240, body)), body, true},
		{"6 minutes old", secret, headers(now.Unix()-360, sign(key, now.Unix()-360, body)), body, false},
		{"6 minutes ahead", secret, headers(now.Unix()+360, sign(key, now.Unix()+360, body)), body, false},
		{"other secret", other, headers(now.Unix(), sign(key, now.Unix(), body)), body, false},
		{"changed body", secret, headers(now.Unix(), sign(key, now.Unix(), body)), []byte(`{"id":"evt_2"}`), false},
		{"unknown version", secret, headers(now.Unix(), "v2,"+sign(key, now.Unix(), body)[3:]), body, false},
		{"no headers", secret, http.Header{}, body, false},
		{"bad secret", "whsec_***", headers(now.Unix(), sign(key, now.Unix(), body)), body, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := client.VerifyWebhook(tt.secret, tt.h, tt.body, now)
			if (err == nil) != tt.ok {
				t.Fatalf("VerifyWebhook = %q, %v; want ok %v", id, err, tt.ok)
			}
			if err != nil && !errors.Is(err, client.ErrWebhookSignature) {
				t.Errorf("error %v does not wrap ErrWebhookSignature", err)
			}
			if err == nil && id != "evt_1" {
				t.Errorf("id %q, want evt_1", id)
			}
		})
	}
}
