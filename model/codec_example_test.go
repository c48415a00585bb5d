package model_test

import (
	"bytes"
	"fmt"

	"github.com/google/uuid"

	"github.com/bunbox/bunbox/model"
)

// A Codec compresses and encrypts a payload; after a key rotation, a payload encrypted under the old key
// still decodes, because the keyring keeps that key by its id.
func ExampleNewCodec() {
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32) // from your secret store
	before, _ := model.NewKeyring("2026-11", map[string][]byte{"2026-11": oldKey})
	writer, _ := model.NewCodec(model.CompressAbove(1024), model.EncryptWith(before))

	id := uuid.New()
	data, encoding, keyID, err := writer.Encode(id, []byte(`{"email":"alice@example.com"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(encoding, keyID)

	after, _ := model.NewKeyring("2026-12", map[string][]byte{"2026-11": oldKey, "2026-12": newKey})
	reader, _ := model.NewCodec(model.EncryptWith(after))
	plain, err := reader.Decode(id, encoding, keyID, data)
	fmt.Println(string(plain), err)
	fmt.Println(after)
	// Output:
	// aes-gcm 2026-11
	// {"email":"alice@example.com"} <nil>
	// Keyring(current 2026-12; ids 2026-11, 2026-12)
}
