package events

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// secretPrefix starts every endpoint secret: "whsec_" and the base64 of
// secretLen random bytes, the HMAC key.
const (
	secretPrefix = "whsec_"
	secretLen    = 32
)

// NewSecret returns a new endpoint secret, "whsec_<base64>".
func NewSecret() string {
	b := make([]byte, secretLen)
	_, _ = rand.Read(b)
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// secretKey returns the HMAC key of a "whsec_<base64>" secret.
func secretKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("events: a secret is whsec_ and base64")
	}
	return key, nil
}

// Signature returns the Standard Webhooks signatures of a message, for
// the webhook-signature header: "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" per secret, space-separated (during a rotation's
// overlap both the new and the previous secret sign).
func Signature(id string, at time.Time, body []byte, secrets ...string) (string, error) {
	parts := make([]string, 0, len(secrets))
	ts := strconv.FormatInt(at.Unix(), 10)
	for _, s := range secrets {
		key, err := secretKey(s)
		if err != nil {
			return "", err
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(parts, " "), nil
}
