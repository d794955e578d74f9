package wcache

import (
	"os"
	"syscall"
)

// identity is what says a file is unchanged without reading it.
type identity struct {
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
	Ctime int64  `json:"ctime_ns"` // cannot be set back by a user, unlike mtime
	Inode uint64 `json:"inode"`
	Dev   uint64 `json:"dev"`
}

func identityOf(fi os.FileInfo) identity {
	id := identity{Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.Ctime = st.Ctim.Nano()
		id.Inode, id.Dev = st.Ino, st.Dev
	}
	return id
}
