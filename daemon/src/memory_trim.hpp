// Giving freed heap back to the system after a burst of large requests. glibc keeps what
// is freed in its arenas (one per thread that allocated: each connection loop has its
// own), so without this a flood of large frames or values leaves kilnd's RSS at its peak
// for good. Internal to kiln_daemon.
#pragma once

namespace kiln::daemon {

// Asks for a malloc_trim(0) a little later (kTrimDelay), on a thread of its own started
// on first use: the frees at the tail of a burst land before it, and the caller (a
// connection loop) never pays for walking the arenas. Requests made while one is
// pending are merged into it; one made during a trim gets another after it.
// Thread safety: any thread.
void trim_heap_soon();

}  // namespace kiln::daemon
