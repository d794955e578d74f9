//go:build !linux

package wcache

import "os"

// identity is what says a file is unchanged without reading it (size and
// modification time where the inode and change time are not at hand).
type identity struct {
	Size  int64 `json:"size"`
	Mtime int64 `json:"mtime_ns"`
}

func identityOf(fi os.FileInfo) identity {
	return identity{Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
}
