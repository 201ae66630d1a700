package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WebhookTolerance is how far a webhook's timestamp may be from now,
// either way, for VerifyWebhook to accept it: an older message cannot be
// replayed.
const WebhookTolerance = 5 * time.Minute

// ErrWebhookSignature is wrapped by every error of VerifyWebhook.
var ErrWebhookSignature = errors.New("client: webhook not verified")

// VerifyWebhook checks a webhook Tollgate sent, signed per Standard
// Webhooks, and returns its webhook-id (the same on every retry of a
// message: use it to ignore repeats). secret is the endpoint's
// "whsec_<base64>" secret; header the request's headers (webhook-id,
// webhook-timestamp, webhook-signature); body the raw body as received,
// not decoded and encoded again; now the clock (time.Now()). The
// timestamp must be within WebhookTolerance of now, and one of the
// space-separated "v1,<base64>" signatures (two are sent while a secret
// is rotated) the HMAC-SHA256 of "id.timestamp.body". The error wraps
// ErrWebhookSignature and says what failed.
func VerifyWebhook(secret string, header http.Header, body []byte, now time.Time) (id string, err error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return "", fmt.Errorf("%w: the secret is not whsec_ and base64", ErrWebhookSignature)
	}
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "", fmt.Errorf("%w: missing webhook-id, webhook-timestamp or webhook-signature", ErrWebhookSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%w: webhook-timestamp %q is not Unix seconds", ErrWebhookSignature, ts)
	}
	if skew := now.Sub(time.Unix(sec, 0)); skew > WebhookTolerance || skew < -WebhookTolerance {
		return "", fmt.Errorf("%w: webhook-timestamp is %v away from now", ErrWebhookSignature, skew.Round(time.Second))
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
			return id, nil
		}
	}
	return "", fmt.Errorf("%w: no signature matches", ErrWebhookSignature)
}
