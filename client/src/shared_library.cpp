// libkiln.so's own translation unit: the library is kiln_client linked whole, with only
// the C API (kiln_*) exported by libkiln.map. CMake needs one source per library target;
// this one defines nothing.
