package ckpt

import (
	"os"
	"path/filepath"
)

// hfMetadataFiles are the files of an HF directory that opening or
// converting a checkpoint reads besides the shards.
var hfMetadataFiles = []string{
	"config.json", "model.safetensors.index.json", "generation_config.json",
	"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
}

// InputFiles lists the existing files that reading ck involves: a GGUF file,
// or an HF directory's shards, index, config and tokenizer files. A tool
// that writes must not write any of them.
func InputFiles(ck Checkpoint) []string {
	var out []string
	if c, ok := ck.(*checkpoint); ok {
		for _, f := range c.files {
			out = append(out, f.path)
		}
	}
	if ck.Format() == "gguf" {
		return append(out, ck.Path())
	}
	for _, name := range hfMetadataFiles {
		p := filepath.Join(ck.Path(), name)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
