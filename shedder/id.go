package shedder

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// randomID returns 16 random hex digits naming this instance in Redis.
func randomID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("shedder: generating an instance ID: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
