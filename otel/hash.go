package otel

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"sync"

	"github.com/floodgate-go/floodgate"
)

// keyHasher computes floodgate.key_hash: a keyed hash, so that low-entropy
// principals (IPv4 addresses, numeric user ids) cannot be recovered from
// exported telemetry by hashing every candidate.
type keyHasher struct {
	pool sync.Pool
}

type hashState struct {
	mac hash.Hash
	buf []byte
	sum []byte
}

var (
	processSecretOnce sync.Once
	processSecret     []byte
	processSecretErr  error
)

// newKeyHasher returns a hasher keyed by secret, or by a random secret
// drawn once per process when secret is nil.
func newKeyHasher(secret []byte) (*keyHasher, error) {
	if secret == nil {
		processSecretOnce.Do(func() {
			b := make([]byte, 32)
			if _, err := rand.Read(b); err != nil {
				processSecretErr = fmt.Errorf("drawing the key hash secret: %w", err)
				return
			}
			processSecret = b
		})
		if processSecretErr != nil {
			return nil, processSecretErr
		}
		secret = processSecret
	}
	k := &keyHasher{}
	k.pool.New = func() any {
		return &hashState{mac: hmac.New(sha256.New, secret), buf: make([]byte, 0, 64), sum: make([]byte, 0, sha256.Size)}
	}
	return k, nil
}

// principal kinds, the first byte hashed.
const (
	kindAPIKey = 'k'
	kindUser   = 'u'
	kindTenant = 't'
	kindIP     = 'i'
)

func (k *keyHasher) hash(id floodgate.Identity) string {
	st := k.pool.Get().(*hashState)
	b := st.buf[:0]
	switch {
	case id.APIKey != "":
		b = append(append(b, kindAPIKey), id.APIKey...)
	case id.User != "":
		b = append(append(b, kindUser), id.User...)
	case id.Tenant != "":
		b = append(append(b, kindTenant), id.Tenant...)
	case id.IP.IsValid():
		b = id.IP.AppendTo(append(b, kindIP))
	default:
		k.pool.Put(st)
		return ""
	}
	st.mac.Reset()
	st.mac.Write(b)
	st.sum = st.mac.Sum(st.sum[:0])
	var out [16]byte
	hex.Encode(out[:], st.sum[:8])
	if cap(b) <= 1024 { // do not pool a buffer one huge key grew
		st.buf = b[:0]
	} else {
		st.buf = make([]byte, 0, 64)
	}
	k.pool.Put(st)
	return string(out[:])
}
