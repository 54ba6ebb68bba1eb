package seal_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/idem-go/idem/seal"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, seal.KeySize) }

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

func mustKeys(t testing.TB, spec string) *seal.StaticKeys {
	t.Helper()
	k, err := seal.ParseKeys(spec)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A new primary key seals new records; the old key, still known, opens the
// records it sealed; once dropped, they no longer open.
func TestRotation(t *testing.T) {
	ctx := context.Background()
	old := seal.New(mustKeys(t, "k1:"+b64(key(1))))
	id, sealed, err := old.Seal(ctx, []byte("secret"), []byte("ad"))
	if err != nil || id != "k1" {
		t.Fatalf("Seal = %q, %v", id, err)
	}
	rotated := seal.New(mustKeys(t, "k2:"+b64(key(2))+", k1:"+b64(key(1))))
	if plain, err := rotated.Open(ctx, "k1", sealed, []byte("ad")); err != nil || string(plain) != "secret" {
		t.Fatalf("old record after rotation: %q, %v", plain, err)
	}
	id2, sealed2, err := rotated.Seal(ctx, []byte("secret"), []byte("ad"))
	if err != nil || id2 != "k2" {
		t.Fatalf("Seal after rotation = %q, %v", id2, err)
	}
	if bytes.Contains(sealed2, []byte("secret")) || bytes.Equal(sealed, sealed2) {
		t.Fatal("sealed bytes hold the plaintext, or repeat")
	}
	dropped := seal.New(mustKeys(t, "k2:"+b64(key(2))))
	if _, err := dropped.Open(ctx, "k1", sealed, []byte("ad")); !errors.Is(err, seal.ErrUnknownKey) {
		t.Fatalf("dropped key: err = %v, want ErrUnknownKey", err)
	}
}

func TestOpenRefusesTamperedOrMoved(t *testing.T) {
	ctx := context.Background()
	s := seal.New(mustKeys(t, "k1:"+b64(key(1))+",k2:"+b64(key(2))))
	_, sealed, err := s.Seal(ctx, []byte("secret"), []byte("store key A"))
	if err != nil {
		t.Fatal(err)
	}
	flipped := func(i int) []byte {
		b := bytes.Clone(sealed)
		b[i] ^= 1
		return b
	}
	cases := map[string]struct {
		id     string
		sealed []byte
		ad     string
	}{
		"other additional data": {"k1", sealed, "store key B"},
		"other key":             {"k2", sealed, "store key A"},
		"nonce flipped":         {"k1", flipped(0), "store key A"},
		"ciphertext flipped":    {"k1", flipped(14), "store key A"},
		"tag flipped":           {"k1", flipped(len(sealed) - 1), "store key A"},
		"truncated":             {"k1", sealed[:len(sealed)-1], "store key A"},
		"empty":                 {"k1", nil, "store key A"},
	}
	for name, c := range cases {
		if plain, err := s.Open(ctx, c.id, c.sealed, []byte(c.ad)); !errors.Is(err, seal.ErrOpen) || plain != nil {
			t.Errorf("%s: Open = %q, %v; want ErrOpen", name, plain, err)
		}
	}
}

func TestParseKeys(t *testing.T) {
	k := key(7)
	for _, spec := range []string{
		"a:" + b64(k),
		"a:" + base64.RawStdEncoding.EncodeToString(k),
		"a:" + base64.URLEncoding.EncodeToString(append([]byte{0xfb, 0xff}, k[2:]...)),
		" a:" + b64(k) + " , b.2_x-y:" + b64(key(8)),
	} {
		p, err := seal.ParseKeys(spec)
		if err != nil {
			t.Fatalf("%q: %v", spec, err)
		}
		if id, got, _ := p.Primary(context.Background()); id != "a" || len(got) != seal.KeySize {
			t.Fatalf("%q: primary %q of %d bytes", spec, id, len(got))
		}
	}
	for _, spec := range []string{
		"",
		"a",
		"a:" + b64(k[:16]),
		"a:!!!",
		":" + b64(k),
		"a b:" + b64(k),
		strings.Repeat("x", 65) + ":" + b64(k),
		"a:" + b64(k) + ",a:" + b64(key(8)),
		"a:" + b64(k) + ",",
	} {
		if _, err := seal.ParseKeys(spec); !errors.Is(err, seal.ErrInvalidKey) {
			t.Errorf("%q: err = %v, want ErrInvalidKey", spec, err)
		}
	}
	if _, err := seal.NewStaticKeys("b", map[string][]byte{"a": k}); !errors.Is(err, seal.ErrInvalidKey) {
		t.Errorf("primary not among the keys: err = %v", err)
	}
}

// A key written where its id goes ("<base64 key>:<id>") is not shown in
// the error, which the examples log and idemctl prints.
func TestParseKeysErrorsHideKeys(t *testing.T) {
	k := key(9)
	for _, secret := range []string{b64(k), base64.RawStdEncoding.EncodeToString(k), base64.RawURLEncoding.EncodeToString(k)} {
		for _, spec := range []string{secret + ":k1", "a:" + b64(key(1)) + "," + secret + ":k1"} {
			_, err := seal.ParseKeys(spec)
			if !errors.Is(err, seal.ErrInvalidKey) || strings.Contains(err.Error(), secret[:16]) {
				t.Errorf("%q: err = %v, want ErrInvalidKey without the key", spec, err)
			}
		}
	}
	if _, err := seal.NewStaticKeys(b64(k), map[string][]byte{"a": k}); !errors.Is(err, seal.ErrInvalidKey) || strings.Contains(err.Error(), b64(k)[:16]) {
		t.Errorf("NewStaticKeys with a key for the primary id: err = %v, want ErrInvalidKey without the key", err)
	}
}

// A provider whose key of an id changed is not served the cached cipher.
type changing struct {
	seal.KeyProvider
	key []byte
}

func (c *changing) Primary(context.Context) (string, []byte, error) { return "k", c.key, nil }
func (c *changing) Key(context.Context, string) ([]byte, error)     { return c.key, nil }

func TestCipherFollowsTheProvidersKey(t *testing.T) {
	ctx := context.Background()
	p := &changing{key: key(1)}
	s := seal.New(p)
	_, sealed, err := s.Seal(ctx, []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.key = key(2)
	if _, err := s.Open(ctx, "k", sealed, nil); !errors.Is(err, seal.ErrOpen) {
		t.Fatalf("opened with a cached cipher of the old key: %v", err)
	}
}

// FuzzOpen: whatever the bytes, key id and additional data, Open never
// panics, and opens only what Seal sealed with that additional data.
func FuzzOpen(f *testing.F) {
	s := seal.New(mustKeys(f, "k1:"+b64(key(1))))
	ctx := context.Background()
	_, sealed, err := s.Seal(ctx, []byte("plaintext"), []byte("ad"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("k1", bytes.Clone(sealed), []byte("ad")) // clones: the fuzzer may write into the seeds
	f.Add("k1", bytes.Clone(sealed[:12]), []byte("ad"))
	f.Add("k2", bytes.Clone(sealed), []byte("ad"))
	f.Add("", []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, id string, b, ad []byte) {
		plain, err := s.Open(ctx, id, b, ad)
		if err != nil {
			if !errors.Is(err, seal.ErrOpen) && !errors.Is(err, seal.ErrUnknownKey) {
				t.Fatalf("error %v wraps neither ErrOpen nor ErrUnknownKey", err)
			}
			return
		}
		// (Each fuzzing process seals with its own nonce: compare contents.)
		if id != "k1" || string(ad) != "ad" || string(plain) != "plaintext" {
			t.Fatalf("opened %q from bytes Seal did not make", plain)
		}
	})
}

func TestNewNilPanics(t *testing.T) {
	defer func() {
		if r := recover(); r != "seal: New with a nil KeyProvider" {
			t.Fatalf("recovered %v", r)
		}
	}()
	seal.New(nil)
}

// kms is a KeyProvider that names its keys as a KMS does: an ARN.
type kms struct{ id string }

func (k kms) Primary(context.Context) (string, []byte, error) { return k.id, key(9), nil }
func (k kms) Key(_ context.Context, id string) ([]byte, error) {
	if id != k.id {
		return nil, seal.ErrUnknownKey
	}
	return key(9), nil
}

// A KeyProvider's ids are core's (1 to 255 bytes): a KMS names its keys
// with ':' and '/', which IDEM_SEAL_KEYS's syntax alone forbids. Refused,
// every record would go unsealed and unstored, and its request run again
// once its lock expired.
func TestProviderIDsOfAKMS(t *testing.T) {
	ctx := context.Background()
	const arn = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	s := seal.New(kms{id: arn})
	id, sealed, err := s.Seal(ctx, []byte("secret"), []byte("ad"))
	if err != nil || id != arn {
		t.Fatalf("Seal = %q, %v", id, err)
	}
	if plain, err := s.Open(ctx, arn, sealed, []byte("ad")); err != nil || string(plain) != "secret" {
		t.Fatalf("Open = %q, %v", plain, err)
	}
	for _, bad := range []string{"", strings.Repeat("k", 256)} {
		if _, _, err := seal.New(kms{id: bad}).Seal(ctx, []byte("x"), nil); !errors.Is(err, seal.ErrInvalidKey) {
			t.Errorf("Seal under an id of %d bytes: %v, want ErrInvalidKey", len(bad), err)
		}
	}
}
