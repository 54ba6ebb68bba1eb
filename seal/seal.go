// Package seal encrypts the records idem stores (core.Config.Sealer) with
// AES-256-GCM under keys named by id, so that keys rotate: the primary key
// seals new records, and every key the KeyProvider still knows opens the
// records it sealed.
//
//	keys, err := seal.ParseKeys(os.Getenv("IDEM_SEAL_KEYS")) // "k2:<base64>,k1:<base64>": k2 seals
//	...
//	eng, err := core.New(core.Config{Store: store, Sealer: seal.New(keys)})
//
// Keys come from a KeyProvider: StaticKeys holds them in memory; a provider
// of a KMS fetches (and caches) them. Each record is sealed with a random
// 96-bit nonce: rotate the primary key before it seals 2^32 records. See
// [docs/design.md], "Encryption at rest".
//
// [docs/design.md]: https://github.com/idem-go/idem/blob/main/docs/design.md
package seal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// Errors of this package.
var (
	// ErrUnknownKey reports a key id the KeyProvider does not know.
	ErrUnknownKey = errors.New("seal: unknown key id")
	// ErrInvalidKey reports a key that is not KeySize bytes, or an id that
	// is not 1 to 64 characters of [A-Za-z0-9._-] (ParseKeys, StaticKeys)
	// or, given by another KeyProvider, not 1 to 255 bytes.
	ErrInvalidKey = errors.New("seal: invalid key")
	// ErrOpen reports sealed bytes that do not open: tampered with, sealed
	// under another key or with other additional data (another store key).
	ErrOpen = errors.New("seal: message authentication failed")
)

// KeyProvider gives the keys that seal and open records. A key id must
// always name the same key, and be 1 to 255 bytes (core.Sealer's bound;
// a KMS's key ARN or resource name will do): it is stored in clear.
type KeyProvider interface {
	// Primary returns the key that seals new records, and its id.
	Primary(ctx context.Context) (id string, key []byte, err error)
	// Key returns the key of id, or an error wrapping ErrUnknownKey.
	Key(ctx context.Context, id string) ([]byte, error)
}

// StaticKeys is a KeyProvider of keys held in memory.
type StaticKeys struct {
	primary string
	keys    map[string][]byte
}

// NewStaticKeys returns the provider of keys, whose key primary seals. It
// returns an error wrapping ErrInvalidKey for a bad id or key, or if
// primary is not among keys.
func NewStaticKeys(primary string, keys map[string][]byte) (*StaticKeys, error) {
	k := &StaticKeys{primary: primary, keys: make(map[string][]byte, len(keys))}
	for id, key := range keys {
		if err := checkKey(id, key); err != nil {
			return nil, err
		}
		k.keys[id] = append([]byte(nil), key...)
	}
	if _, ok := k.keys[primary]; !ok {
		if err := checkID(primary); err != nil {
			return nil, fmt.Errorf("%w: primary %v", ErrInvalidKey, err)
		}
		return nil, fmt.Errorf("%w: primary key %q not given", ErrInvalidKey, primary)
	}
	return k, nil
}

// ParseKeys returns the provider of the keys in spec, as the examples read
// IDEM_SEAL_KEYS: "<id>:<base64 key>[,<id>:<base64 key>...]", the first
// primary. Keys are in standard or URL base64, padded or not.
func ParseKeys(spec string) (*StaticKeys, error) {
	var primary string
	keys := make(map[string][]byte)
	for i, part := range strings.Split(spec, ",") {
		id, b64, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("%w: key %d: want <id>:<base64 key>", ErrInvalidKey, i+1)
		}
		// Errors name a key by its position, not its id: a key written
		// before its id ("<base64 key>:<id>") would be shown.
		if err := checkID(id); err != nil {
			return nil, fmt.Errorf("%w: key %d: want <id>:<base64 key>, %v", ErrInvalidKey, i+1, err)
		}
		key, err := decodeBase64(b64)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: key %d: %v", ErrInvalidKey, i+1, err)
		case len(key) != KeySize:
			return nil, fmt.Errorf("%w: key %d has %d bytes, want %d", ErrInvalidKey, i+1, len(key), KeySize)
		}
		if _, dup := keys[id]; dup {
			return nil, fmt.Errorf("%w: key %d: id given twice", ErrInvalidKey, i+1)
		}
		keys[id] = key
		if i == 0 {
			primary = id
		}
	}
	return NewStaticKeys(primary, keys)
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	return enc.DecodeString(s)
}

// Primary implements KeyProvider.
func (k *StaticKeys) Primary(context.Context) (string, []byte, error) {
	return k.primary, k.keys[k.primary], nil
}

// Key implements KeyProvider.
func (k *StaticKeys) Key(_ context.Context, id string) ([]byte, error) {
	key, ok := k.keys[id]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownKey, id)
	}
	return key, nil
}

func checkKey(id string, key []byte) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	if len(key) != KeySize {
		return fmt.Errorf("%w: key %q has %d bytes, want %d", ErrInvalidKey, id, len(key), KeySize)
	}
	return nil
}

// checkID reports an id that is not 1 to 64 characters of [A-Za-z0-9._-],
// without quoting it: it may be key material given in the wrong place.
func checkID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("key id of %d characters: want 1 to 64 of [A-Za-z0-9._-]", len(id))
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errors.New("key id not of [A-Za-z0-9._-]")
		}
	}
	return nil
}

// Sealer is a core.Sealer: AES-256-GCM with a random nonce, under the keys
// of a KeyProvider. It is safe for concurrent use. Make one with New; the
// zero value is not usable.
type Sealer struct {
	keys  KeyProvider
	aeads sync.Map // key id → *aead
}

type aead struct {
	key []byte
	cipher.AEAD
}

// New returns the Sealer of the keys of p. It panics if p is nil.
func New(p KeyProvider) *Sealer {
	if p == nil {
		panic("seal: New with a nil KeyProvider")
	}
	return &Sealer{keys: p}
}

// Seal implements core.Sealer: the primary key seals plaintext; sealed is
// the nonce, the ciphertext and the tag.
func (s *Sealer) Seal(ctx context.Context, plaintext, additionalData []byte) (string, []byte, error) {
	id, key, err := s.keys.Primary(ctx)
	if err != nil {
		return "", nil, err
	}
	a, err := s.aead(id, key)
	if err != nil {
		return "", nil, err
	}
	return id, a.Seal(nil, nil, plaintext, additionalData), nil
}

// Open implements core.Sealer. It returns an error wrapping ErrUnknownKey,
// or ErrOpen if sealed does not open with additionalData.
func (s *Sealer) Open(ctx context.Context, keyID string, sealed, additionalData []byte) ([]byte, error) {
	key, err := s.keys.Key(ctx, keyID)
	if err != nil {
		return nil, err
	}
	a, err := s.aead(keyID, key)
	if err != nil {
		return nil, err
	}
	plain, err := a.Open(nil, nil, sealed, additionalData)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// maxProviderID is the longest key id a KeyProvider may give: core's
// bound for a Sealer's key id.
const maxProviderID = 255

// aead returns the cipher of key, named id: cached, as long as the
// provider gives the same key for id. Ids of StaticKeys are checked when
// parsed; those of another provider (a KMS's ARN) need only fit in a
// stored record.
func (s *Sealer) aead(id string, key []byte) (*aead, error) {
	if v, ok := s.aeads.Load(id); ok {
		if a := v.(*aead); subtle.ConstantTimeCompare(a.key, key) == 1 {
			return a, nil
		}
	}
	switch {
	case id == "" || len(id) > maxProviderID:
		return nil, fmt.Errorf("%w: key id of %d bytes, want 1 to %d", ErrInvalidKey, len(id), maxProviderID)
	case len(key) != KeySize:
		return nil, fmt.Errorf("%w: key %q has %d bytes, want %d", ErrInvalidKey, id, len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	g, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		return nil, err
	}
	a := &aead{key: append([]byte(nil), key...), AEAD: g}
	s.aeads.Store(id, a)
	return a, nil
}
