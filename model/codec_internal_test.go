package model

import (
	"bytes"
	"compress/gzip"
	"testing"
)

// TestGunzipBoundsDecompression: a gzip bomb is refused at the limit (Codec.Decode's is the
// Codec's MaxDecodedSize), after reading no more than one byte past it.
func TestGunzipBoundsDecompression(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := gunzip(b.Bytes(), 1<<20); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	_, err := gunzip(b.Bytes(), 1<<20-1)
	if err == nil || err.Error() != "decompresses to more than 1048575 bytes, the codec's limit (model.MaxDecodedSize)" {
		t.Fatalf("over the limit: %v", err)
	}
}
