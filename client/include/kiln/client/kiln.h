/* kiln/client/kiln.h — libkiln's C API, for C programs and other languages' bindings.
 *
 * A thin layer over the C++ API (kiln/client/client.hpp); the same behaviour and
 * contracts hold. No C++ type crosses this header.
 *
 * Errors: every call that can fail returns a kiln_status (KILN_OK = 0; the other values
 * are kiln::Errc's, stable and append-only). The message of the last failed call on the
 * calling thread is kiln_last_error(): valid until that thread's next kiln_* call.
 * - The daemon not running / the connection lost: KILN_UNAVAILABLE at once; the next call
 *   on the same client connects again.
 * - A miss (get, stat) and remove/pin/unpin of a key that is not stored: KILN_NOT_FOUND,
 *   with *out set to NULL. It is not a failure of the daemon.
 * - A NULL where a value is required: KILN_INVALID_ARGUMENT.
 *
 * Ownership: every handle a kiln_*_new / kiln_connect / kiln_get returns is owned by the
 * caller and released with its *_free function (which accept NULL). Strings returned
 * through a `char**` are malloc'd and released with kiln_free(). Strings returned as
 * `const char*` belong to the handle and live as long as it.
 *
 * Threads: a kiln_client may be shared between threads; its calls are serialized on its
 * one connection (create one per thread for parallel requests). kiln_key and
 * kiln_artifact handles must not be modified and read from two threads at once.
 *
 * Artifacts: kiln_artifact_fd() is a read-only descriptor of the artifact's bytes, owned
 * by the artifact (closed by kiln_artifact_free); kiln_artifact_path() names it as
 * "/proc/self/fd/N" for libraries that take a file name.
 *
 * Lookups: functions that find one artifact take `key` or `digest_hex` (64 hex chars of
 * a complete key's digest): exactly one of the two must be non-NULL.
 */
#ifndef KILN_CLIENT_KILN_H
#define KILN_CLIENT_KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1,
  KILN_NOT_FOUND = 2,
  KILN_CORRUPT = 3,
  KILN_IO_ERROR = 4,
  KILN_NO_SPACE = 5,
  KILN_QUOTA_EXCEEDED = 6,
  KILN_READ_ONLY = 7,
  KILN_PERMISSION_DENIED = 8,
  KILN_PROTOCOL_ERROR = 9,
  KILN_UNAVAILABLE = 10,
  KILN_TIMEOUT = 11,
  KILN_BUSY = 12,
  KILN_BUILD_FAILED = 13,
  KILN_NO_SOURCE = 14,
  KILN_UNSUPPORTED = 15,
  KILN_CANCELLED = 16,
  KILN_INTERNAL = 17
} kiln_status;

typedef struct kiln_client kiln_client;
typedef struct kiln_key kiln_key;
typedef struct kiln_artifact kiln_artifact;
typedef struct kiln_source kiln_source;

/* The last failed call's message on this thread ("" if none). Never NULL. */
const char* kiln_last_error(void);
/* "ok", "not_found", "unavailable", ... ; "unknown" for other values. Never NULL. */
const char* kiln_status_name(kiln_status status);
/* Releases a string a kiln_* call returned through a char**. NULL is fine. */
void kiln_free(void* p);

/* ---- keys ------------------------------------------------------------------------- */

/* A key with its required fields; node fields empty ("this node": the daemon fills them). */
kiln_status kiln_key_new(const char* kind, const char* model_hash, const char* region, const char* dtype,
                         kiln_key** out);
/* A key from its JSON form (schema/key.md). The message names a bad field. */
kiln_status kiln_key_from_json(const char* json, kiln_key** out);
void kiln_key_free(kiln_key* key);
/* Sets one field by its name in kiln's key (schema/key.md): "region", "gpu_arch", "call" (a JSON object text),
 * "torch_version", "compile_options" (a JSON object text), ... ; inputs are added with
 * kiln_key_add_input. KILN_INVALID_ARGUMENT for an unknown name or a bad value. */
kiln_status kiln_key_set(kiln_key* key, const char* field, const char* value);
/* Appends one input, e.g. "bfloat16:1x4096x3072" or "float32:1..64x3072"
 * (kiln/client/key_text.hpp has the grammar). */
kiln_status kiln_key_add_input(kiln_key* key, const char* spec);
/* The key's JSON form, to kiln_free. */
kiln_status kiln_key_to_json(const kiln_key* key, char** out);
/* The digest as 64 hex chars + NUL into out_hex. KILN_INVALID_ARGUMENT when the key is
 * incomplete (the message lists the empty fields: node fields need the daemon). */
kiln_status kiln_key_digest(const kiln_key* key, char out_hex[65]);

/* ---- connecting ------------------------------------------------------------------- */

/* socket_path NULL or "": $KILN_SOCKET, else the default socket (as kilnd's). */
kiln_status kiln_connect(const char* socket_path, kiln_client** out);
/* Same, with hits streamed through the socket instead of handed over as a descriptor. */
kiln_status kiln_connect_streaming(const char* socket_path, kiln_client** out);
void kiln_client_free(kiln_client* client);

/* ---- artifacts -------------------------------------------------------------------- */

/* KILN_OK and *out set on a hit; KILN_NOT_FOUND and *out = NULL on a miss. */
kiln_status kiln_get(kiln_client* client, const kiln_key* key, const char* digest_hex, kiln_artifact** out);
/* Like kiln_get with a key, but a miss has kilnd build the artifact from the source
 * registered for the key's model hash and wait for it (concurrent askers share one
 * build); wait_ms bounds the wait (0 = until kilnd's build timeout). KILN_OK and *out on
 * success. Errors: KILN_NO_SOURCE (nothing registered for the model hash),
 * KILN_BUILD_FAILED (also a failure kilnd remembers from a recent build), KILN_UNSUPPORTED
 * (the node cannot build), KILN_TIMEOUT (wait_ms passed; the build goes on and a later get
 * finds it). */
kiln_status kiln_get_build(kiln_client* client, const kiln_key* key, uint32_t wait_ms, kiln_artifact** out);
int kiln_artifact_fd(const kiln_artifact* artifact);
uint64_t kiln_artifact_size(const kiln_artifact* artifact);
const char* kiln_artifact_path(const kiln_artifact* artifact);
/* The artifact's metadata as JSON (kiln/client/json.hpp), owned by the artifact. */
const char* kiln_artifact_info_json(const kiln_artifact* artifact);
void kiln_artifact_free(kiln_artifact* artifact);

/* Stores `size` bytes at `data` (data may be NULL when size is 0) as the artifact for
 * `key`. pin != 0 pins it. info_json (may be NULL) receives the stored metadata. */
kiln_status kiln_put(kiln_client* client, const kiln_key* key, const void* data, size_t size, int pin,
                     char** info_json);
/* Same, streaming the file at `path`. */
kiln_status kiln_put_file(kiln_client* client, const kiln_key* key, const char* path, int pin, char** info_json);

/* Metadata as JSON; KILN_NOT_FOUND with *info_json = NULL when not stored. */
kiln_status kiln_stat(kiln_client* client, const kiln_key* key, const char* digest_hex, char** info_json);
/* query_json (NULL = everything, first page): {"filters":{"region":"..",...},
 * "pinned":bool, "accessed_before":i64, "limit":n, "offset":n}. Result:
 * {"items":[info...],"next_offset":n} (next_offset absent on the last page). */
kiln_status kiln_list(kiln_client* client, const char* query_json, char** result_json);
/* Why `key` missed (kiln/client/explain.hpp): result_json receives {"key_digest":..,
 * "stored":bool,"nearest":[{"key_digest":..,"differing":["gpu_name",..],"key":{..}}],
 * "candidates":n,"source_registered":bool,"advice":".."}; at most `limit` nearest keys
 * (0 = 5). Read role. */
kiln_status kiln_explain(kiln_client* client, const kiln_key* key, size_t limit, char** result_json);
/* KILN_NOT_FOUND when nothing is stored under the key. */
kiln_status kiln_remove(kiln_client* client, const kiln_key* key, const char* digest_hex);
kiln_status kiln_pin(kiln_client* client, const kiln_key* key, const char* digest_hex);
kiln_status kiln_unpin(kiln_client* client, const kiln_key* key, const char* digest_hex);

/* Any request whose reply is one JSON document, by its name in schema/protocol.md:
 * "BUILD" (with "wait": false it returns at once), "BUILD_STATUS", "LOGS", "STAT", "LIST",
 * "STATS", "STATUS", "EVICT", "VERIFY", "GC", "RELOAD", "LIST_SOURCES", "DELETE", "PIN",
 * "UNPIN", "PREWARM_SUBMIT" (without events). body_json is the request's JSON (NULL or ""
 * = {}); *reply_json (to kiln_free) the reply's. A daemon ERROR keeps its code and
 * message. KILN_INVALID_ARGUMENT for another name (GET, PUT, the sources' transfers and
 * HELLO have their own calls) or a body that is not a JSON object. */
kiln_status kiln_request(kiln_client* client, const char* type_name, const char* body_json, char** reply_json);

/* {"store":{...},"daemon":{...}} */
kiln_status kiln_stats(kiln_client* client, char** json);
/* The daemon's status: version, uptime, node fields, this peer's roles, ... */
kiln_status kiln_daemon_status(kiln_client* client, char** json);

/* ---- sources (torch.export archives builds start from, by model hash) ------------- */

/* The registered sources, a page at a time, ordered by model hash. query_json (NULL =
 * all, first page): {"model_hash_prefix":"ab12", "limit":n, "offset":n}; a prefix that is
 * not 0..64 lowercase hex is KILN_INVALID_ARGUMENT. Result, to kiln_free:
 * {"items":[{"model_hash","blob_digest","size","stored_size","created_at","name"}...],
 *  "next_offset":n} (next_offset absent on the last page; items empty when none match). */
kiln_status kiln_list_sources(kiln_client* client, const char* query_json, char** result_json);
/* The source of `model_hash` (64 lowercase hex), its bytes verified by the daemon; read
 * them through kiln_source_fd() (pread from offset 0) or kiln_source_path(). Unlike
 * kiln_get, a source that is not registered is KILN_NOT_FOUND with a message naming the
 * hash and how to register it; *out is then NULL. KILN_CORRUPT: the stored archive failed
 * verification (the daemon quarantined it). Release with kiln_source_free. */
kiln_status kiln_get_source(kiln_client* client, const char* model_hash, kiln_source** out);
int kiln_source_fd(const kiln_source* source);
uint64_t kiln_source_size(const kiln_source* source);
const char* kiln_source_path(const kiln_source* source);
/* {"model_hash","blob_digest","size","stored_size","created_at","name"}, owned by the source. */
const char* kiln_source_info_json(const kiln_source* source);
void kiln_source_free(kiln_source* source);
/* Registers the torch.export archive at `path` as the source of `model_hash` (64 lowercase
 * hex), read as it goes (write role); model_hash NULL or "": the node computes it (its
 * build worker's hash op) and info_json's model_hash says it, an existing source of that
 * hash being returned as is; KILN_UNSUPPORTED from a node that cannot build. name may be NULL
 * (the file's name is used). info_json (may be NULL) receives the source's metadata as in
 * kiln_source_info_json. KILN_NOT_FOUND if the file is missing, KILN_IO_ERROR if unreadable. */
kiln_status kiln_put_source_file(kiln_client* client, const char* model_hash, const char* name, const char* path,
                                 char** info_json);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CLIENT_KILN_H */
