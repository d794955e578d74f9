package ckpt

import (
	"bufio"
	"context"
	"io"

	"lagc/internal/atomicfile"
)

// WriteGGUFFileContext writes ck to path atomically: into a temporary file
// in the same directory (permissions from the umask), renamed into place
// once complete. When ctx is done, or anything fails, the temporary file is
// removed and path is left as it was.
func WriteGGUFFileContext(ctx context.Context, path string, ck Checkpoint, opt WriteOptions) error {
	f, err := atomicfile.Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	bw := bufio.NewWriterSize(ctxWriter{ctx, f}, 4<<20)
	if err := WriteGGUF(bw, ck, opt); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Commit()
}

// ctxWriter fails writes once ctx is done, so a long write stops at the
// next buffer.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (w ctxWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}
