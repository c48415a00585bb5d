package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/bunbox/bunbox/internal/relayenv"
	"github.com/bunbox/bunbox/relay"
)

// codecKeysFlag adds -codec-keys-file to fs, the relay's keyring file: the path of a file of keys, never
// the keys themselves, which would show in `ps` and in shell histories.
func codecKeysFlag(fs *flag.FlagSet) *string {
	return fs.String("codec-keys-file", "", "decode encoded payloads (bunx.WithLocation's Codec) before the enqueue with the keys of this keyring file: "+
		"lines current=ID and ID=base64 key (see model.ParseKeyring); default $"+relayenv.CodecKeysFileEnv+"; never the keys on the command line; "+
		"payloads decoding to more than $"+relayenv.CodecMaxDecodedEnv+" bytes (default 1 MiB) are kept dead")
}

// applyCodecKeys sets cfg.Location.Codec from the keyring file path of -codec-keys-file, when given (it wins over
// OUTBOX_CODEC_KEYS_FILE, which relayenv.Config read), and logs what the relay decodes with: key ids,
// never a key. An error names the flag, the file and the line, never a key.
func (c *cli) applyCodecKeys(cfg *relay.Config, path string) error {
	if path != "" {
		limit, err := relayenv.CodecMaxDecoded()
		if err != nil {
			return err
		}
		codec, err := relayenv.CodecFromKeysFile(path, limit)
		if err != nil {
			return fmt.Errorf("-codec-keys-file: %w", err)
		}
		cfg.Location.Codec = codec
	}
	if cfg.Location.Codec != nil {
		cfg.Logger.Info("relay decodes encoded payloads before the enqueue", slog.String("codec", cfg.Location.Codec.String()))
	}
	return nil
}
