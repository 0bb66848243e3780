/*
 * OpenSSL's contexts and connections, sized: what an ``ssl.SSLContext`` holds in OpenSSL's
 * heap (its certificate store, its session cache, its ciphers: ~850 KB for a
 * create_default_context(), which sys.getsizeof calls 144 bytes), and an ``ssl.SSLSocket``'s
 * connection (its SSL, session and the peer's certificates: ~18 KB idle). OpenSSL keeps no
 * count of either and its structures are opaque, so their memory is found as a conservative
 * collector would find it: the glibc chunks an SSL_CTX or SSL reaches through words that
 * start a chunk, then theirs (a connection's SSL is taken only where it holds its context's
 * SSL_CTX).
 *
 * A word of a chunk may be stale (freed memory not cleared) and reach another context's
 * store: one context scanned alone was once 4.2 MB and another 4 KB. So every context is
 * scanned at once, breadth first, one depth at a time: a chunk is the nearest context's (the
 * first met at the lowest depth). What OpenSSL's own globals reach (the library context, its
 * providers and method stores, which every context uses) is no context's: it is marked
 * first, from libssl's and libcrypto's writable data. A chunk over SSL_MAX_CHUNK is not
 * followed (a context's are small: certificates, names, keys), nor a Python object met on the
 * way (a callback's, the app data's).
 *
 * Every read goes through process_vm_readv on this process, a batch of pieces a call: a chunk
 * freed by another thread meanwhile reads as what it held or nothing, never a fault. The scan
 * runs with the GIL released (the caller's list keeps the contexts alive); its tables are
 * mappings of its own (no malloc of the target's heap, none in a child forked meanwhile)
 * within ``max_bytes``, and it gives up (None) past its chunk limit or its deadline.
 *
 * Measured (tests/integration/test_native_buffers.py, 3.10-3.13, OpenSSL 3.0): two groups of
 * 40 and 20 contexts made apart are each within 2% of what freeing them returns; 130
 * contexts (1.4M chunks) scan in 1.2 s with 5 MB of tables, 1,000 (850 MB) in 8.6 s, 37 MB.
 */

#define _GNU_SOURCE 1  /* mremap */
#include "_walk.h"
#include <sys/mman.h>
#include <time.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <unistd.h>
#include <link.h>
#include <pthread.h>

#pragma GCC visibility push(hidden)

#define SSL_MAX_CHUNK ((uint64_t)64 << 10)
/* What OpenSSL's globals reach is followed through bigger chunks (its hash tables' buckets) */
#define SSL_MAX_GLOBAL_CHUNK ((uint64_t)256 << 10)
#define SSL_REGION_SHIFT 20                        /* a bitmap per MiB of the heap */
#define SSL_REGION_BITS ((1 << SSL_REGION_SHIFT) >> 4)  /* a bit per 16 bytes */
#define SSL_REGION_BYTES (SSL_REGION_BITS / 8)
#define SSL_ROOT_READ 65536

/* -- tables of their own: anonymous mappings, grown with mremap -------------------------- */

typedef struct {
    unsigned char *data;
    size_t len;   /* mapped */
} Mapping;

/* The most the last scan's tables used at once (ssl_scan_peak): leakhound's own memory in the
 * target, said with its walk's: the bytes written (a mapping's pages are in RAM once written,
 * and each grows to twice what it held), not the bytes mapped, which the budget counts. (One
 * scan at a time: the payload runs one request.) */
static long long scan_peak;

/* ``m`` at least ``want`` bytes; *held counts the scan's mappings, at most ``budget`` (0: no
 * limit). */
static int
mapping_grow(Mapping *m, size_t want, long long budget, long long *held)
{
    if (want <= m->len)
        return 0;
    size_t len = m->len ? m->len : 65536;
    while (len < want)
        len *= 2;
    if (budget > 0 && *held + (long long)(len - m->len) > budget)
        return -1;
    void *p = m->data == NULL ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                              : mremap(m->data, m->len, len, MREMAP_MAYMOVE);
    if (p == MAP_FAILED)
        return -1;
    if (m->data == NULL)
        madvise(p, len, MADV_DONTFORK);  /* a child forked meanwhile gets none of it (mremap keeps it) */
    *held += (long long)(len - m->len);
    m->data = p;
    m->len = len;
    return 0;
}

static void
mapping_free(Mapping *m, long long *held)
{
    *held -= (long long)m->len;
    if (m->data != NULL)
        munmap(m->data, m->len);
    m->data = NULL;
    m->len = 0;
}

/* The chunks seen: a bitmap per MiB of the heap that has one, found by its MiB in an open
 * table (keys: the MiB + 1, 0 empty) of indexes into one mapping of bitmaps. */
typedef struct {
    Mapping keys, index, bits;
    size_t mask, used, regions;
    long long budget;
    long long *held;
} Seen;

static size_t
seen_hash(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 29) & mask;
}

static int
seen_rehash(Seen *s, size_t cap)
{
    Mapping keys = {0}, index = {0};
    if (mapping_grow(&keys, cap * 8, s->budget, s->held) < 0 || mapping_grow(&index, cap * 4, s->budget, s->held) < 0) {
        mapping_free(&keys, s->held);
        mapping_free(&index, s->held);
        return -1;
    }
    uint64_t *ok = (uint64_t *)s->keys.data, *nk = (uint64_t *)keys.data;
    uint32_t *oi = (uint32_t *)s->index.data, *ni = (uint32_t *)index.data;
    for (size_t h = 0; ok != NULL && h <= s->mask; h++) {
        if (ok[h] == 0)
            continue;
        size_t k = seen_hash(ok[h], cap - 1);
        while (nk[k] != 0)
            k = (k + 1) & (cap - 1);
        nk[k] = ok[h];
        ni[k] = oi[h];
    }
    mapping_free(&s->keys, s->held);
    mapping_free(&s->index, s->held);
    s->keys = keys;
    s->index = index;
    s->mask = cap - 1;
    return 0;
}

/* The byte of ``chunk``'s bit (*bit its mask); NULL where its MiB has no bitmap and
 * ``create`` is 0, or on failure (*failed set). */
static unsigned char *
seen_byte(Seen *s, uint64_t chunk, int create, unsigned char *bit, int *failed)
{
    uint64_t key = (chunk >> SSL_REGION_SHIFT) + 1;
    uint32_t granule = (uint32_t)((chunk & ((1u << SSL_REGION_SHIFT) - 1)) >> 4);
    *bit = (unsigned char)(1u << (granule & 7));
    uint64_t *keys = (uint64_t *)s->keys.data;
    size_t k = 0;
    if (keys != NULL) {
        for (k = seen_hash(key, s->mask); keys[k] != 0; k = (k + 1) & s->mask)
            if (keys[k] == key)
                return s->bits.data + (size_t)((uint32_t *)s->index.data)[k] * SSL_REGION_BYTES + (granule >> 3);
    }
    if (!create)
        return NULL;
    if (keys == NULL || (s->used + 1) * 2 > s->mask + 1) {
        if (seen_rehash(s, keys == NULL ? 64 : (s->mask + 1) * 2) < 0) {
            *failed = 1;
            return NULL;
        }
        keys = (uint64_t *)s->keys.data;
        for (k = seen_hash(key, s->mask); keys[k] != 0; k = (k + 1) & s->mask)
            ;
    }
    if (s->regions >= UINT32_MAX || mapping_grow(&s->bits, (s->regions + 1) * SSL_REGION_BYTES, s->budget, s->held) < 0) {
        *failed = 1;
        return NULL;
    }
    keys[k] = key;
    ((uint32_t *)s->index.data)[k] = (uint32_t)s->regions;
    s->used++;
    return s->bits.data + (s->regions++) * SSL_REGION_BYTES + (granule >> 3);  /* (a new mapping's zeros) */
}

/* Every granule of [lo, hi) (both 16-byte aligned) set in ``s``: 0, or -1 (*failed set). */
static int
seen_mark(Seen *s, uint64_t lo, uint64_t hi, int *failed)
{
    while (lo < hi) {
        uint64_t region_end = ((lo >> SSL_REGION_SHIFT) + 1) << SSL_REGION_SHIFT;
        uint64_t end = hi < region_end ? hi : region_end;
        unsigned char bit;
        unsigned char *byte = seen_byte(s, lo, 1, &bit, failed);
        if (byte == NULL)
            return -1;
        for (uint64_t at = lo; at < end;) {
            if (bit == 1 && at + 128 <= end) {
                *byte++ = 0xFF;
                at += 128;
                continue;
            }
            *byte |= bit;
            at += 16;
            if (bit == 0x80) {
                bit = 1;
                byte++;
            }
            else {
                bit = (unsigned char)(bit << 1);
            }
        }
        lo = end;
    }
    return 0;
}

static void
seen_free(Seen *s)
{
    mapping_free(&s->keys, s->held);
    mapping_free(&s->index, s->held);
    mapping_free(&s->bits, s->held);
}

/* -- reads in batches ---------------------------------------------------------------------- */

/* A read is a system call (~1 us): a context is ~11,000 chunks, each read, its type words' and
 * its pointers' headers looked at. They are read a batch at a time instead: up to
 * SSL_IOV pieces a call, each piece ok or not. */
#define SSL_IOV 1024

/* Piece k: ``len[k]`` bytes at ``from[k]`` into ``to[k]``; ok[k] 1 where it was read whole. */
static void
read_pieces(pid_t pid, size_t n, const uint64_t *from, const size_t *len, void *const *to, unsigned char *ok)
{
    struct iovec local[SSL_IOV], remote[SSL_IOV];
    size_t k = 0;
    while (k < n) {
        size_t m = n - k < SSL_IOV ? n - k : SSL_IOV;
        for (size_t j = 0; j < m; j++) {
            local[j].iov_base = to[k + j];
            local[j].iov_len = len[k + j];
            remote[j].iov_base = (void *)(uintptr_t)from[k + j];
            remote[j].iov_len = len[k + j];
        }
        ssize_t got = process_vm_readv(pid, local, m, remote, m, 0);
        size_t j = k;
        if (got > 0) {
            size_t done = 0;
            while (j < k + m && done + len[j] <= (size_t)got) {
                ok[j] = 1;
                done += len[j];
                j++;
            }
        }
        if (j < k + m)
            ok[j++] = 0;  /* the piece the call stopped at: not read (the next call starts after it) */
        k = j;
    }
}

/* -- the scan ----------------------------------------------------------------------------- */

/* A depth's chunks, a word each (100 contexts' widest depth is ~200,000 chunks): the chunk's
 * address and size in 16-byte units (a chunk's address below 2**47, as the kernel maps a
 * process's unless asked otherwise), or, its top bit set, the owner of the chunks after it
 * (the context's index + 1; 0: OpenSSL's globals'), written where the owner changes. */
#define ENTRY_OWNER ((uint64_t)1 << 63)
#define ENTRY_ADDRESS_BITS 43
#define ENTRY_MAX_CHUNK ((uint64_t)1 << 47)

static inline uint64_t
entry_of(uint64_t chunk, uint64_t size)
{
    return (chunk >> 4) | ((size >> 4) << ENTRY_ADDRESS_BITS);
}

/* A batch of pieces is read as the pages they are on, each page once (a context's chunks are
 * ~80 bytes, neighbours in a few pages: a page pinned per piece was most of the scan's time);
 * a batch on more pages than this is read piece by piece. */
#define SSL_PAGE 4096
#define SSL_PAGE_SLOTS 256
/* The pages of a batch are found in a table of this many slots (a power of two, at most
 * half full with SSL_PAGE_SLOTS pages): a sort of the batch's pages was ~10% of the scan's
 * time on 650 pydantic validators' heaps. */
#define SSL_PAGE_HASH 1024

/* Words that may start a chunk not seen yet, checked a batch at a time (scan_flush). */
#define SSL_CANDIDATES 2048
/* Chunks read a batch at a time: this many at most, of this many bytes in all. */
#define SSL_BATCH_ITEMS 512  /* (their type words: 3 each, among the candidates' arrays) */
#define SSL_BATCH_BYTES ((size_t)SSL_MAX_GLOBAL_CHUNK)  /* (the biggest chunk fits) */

typedef struct {
    pid_t pid;
    const HeapRange *ranges;
    Py_ssize_t nranges;
    const HeapRange *last_range;  /* the last one a candidate was in (scan_candidate) */
    Seen seen;
    /* The granules inside the arena chunks taken (after each one's header): a candidate whose
     * header would be there is an interior pointer into one (a DFA state's pointer to its own
     * instructions), whose bytes before it only read as a chunk's header. */
    Seen covered;
    Mapping next;          /* the next depth's entries (entry_of, owners) */
    size_t nnext;
    int64_t next_owner;    /* the owner its last entry is of (INT64_MIN: none yet) */
    long long *totals;
    long long chunks, max_chunks;
    uint64_t type_type;    /* &PyType_Type: a chunk whose type word's type is it is an object */
    uint64_t object_min;   /* no smaller chunk is an object's (pymalloc has those): not looked at */
    double deadline;
    int failed;            /* 1: out of budget, of chunks or of time */
    long long fixed;       /* the scan's own buffers (this struct, the batch's, the pages') */
    size_t next_written;   /* the most entries ``next``'s mapping has held (its pages in RAM) */
    size_t level_written;  /* the same of the depth being read (scan_depths) */
    /* candidates */
    size_t ncand;
    uint64_t cand[SSL_CANDIDATES];
    int32_t cand_owner[SSL_CANDIDATES];
    const HeapRange *cand_range[SSL_CANDIDATES];
    uint64_t cand_expect[SSL_CANDIDATES];  /* the allocation its chunk must be for (0: any) */
    int rust_tables;       /* 1: Rust's hash tables are looked for too (scan_rust_table) */
    int tagged_pointers;   /* 1: words with flags in their low bits are pointers too (scan_word) */
    long interior_reads;   /* the globals' pointers looked behind so far (scan_global_interior) */
    uint64_t max_chunk;    /* an object's chunk over this is not followed (SSL_MAX_CHUNK) */
    int mmapped_ok;        /* 1: glibc's mmapped chunks too (a big table's) */
    uint64_t max_counted;  /* an object's mmapped chunk over max_chunk, up to this: counted, not read */
    unsigned char cand_mmapped[SSL_CANDIDATES];
    uint64_t head[SSL_CANDIDATES][2], after[SSL_CANDIDATES], size[SSL_CANDIDATES];
    uint64_t from[SSL_CANDIDATES];
    size_t len[SSL_CANDIDATES];
    void *to[SSL_CANDIDATES];
    unsigned char ok[SSL_CANDIDATES];
    unsigned char read_ok_meta[SSL_CANDIDATES], meta_ok[SSL_CANDIDATES];  /* (scan_objects') */
    /* the pages a batch of pieces is read from (read_paged) */
    unsigned char *pages;  /* SSL_PAGE_SLOTS pages */
    uint64_t page_key[SSL_PAGE_HASH], page_from[SSL_PAGE_SLOTS];  /* (page + 1, 0: empty) */
    uint16_t page_slot[SSL_PAGE_HASH];
    size_t page_len[SSL_PAGE_SLOTS];
    void *page_to[SSL_PAGE_SLOTS];
    unsigned char page_ok[SSL_PAGE_SLOTS];
    /* a batch of chunks read */
    uint64_t batch_size[SSL_BATCH_ITEMS];
    int32_t batch_owner[SSL_BATCH_ITEMS];
    uint64_t *words[SSL_BATCH_ITEMS];
    size_t nwords[SSL_BATCH_ITEMS], bytes[SSL_BATCH_ITEMS];
    uint64_t batch_from[SSL_BATCH_ITEMS];
    unsigned char read_ok[SSL_BATCH_ITEMS], object[SSL_BATCH_ITEMS];
} Scan;

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The slot of page ``p`` in the batch's table (its page read into sc->pages at
 * page_slot[slot] where page_key[slot] is p + 1; an empty slot where it is not there). */
static inline size_t
page_hash_slot(const Scan *sc, uint64_t p)
{
    size_t k = (size_t)((p * 0x9E3779B97F4A7C15ull) >> 54) & (SSL_PAGE_HASH - 1);
    while (sc->page_key[k] != 0 && sc->page_key[k] != p + 1)
        k = (k + 1) & (SSL_PAGE_HASH - 1);
    return k;
}

/* read_pieces' pieces read as the pages they are on: each page once, in one call of up to
 * SSL_IOV pages (a page that cannot be read fails the pieces on it, as a piece would); piece
 * by piece where they are on more than SSL_PAGE_SLOTS pages. */
static void
read_paged(Scan *sc, size_t n, const uint64_t *from, const size_t *len, void *const *to, unsigned char *ok)
{
    size_t u = 0;
    memset(sc->page_key, 0, sizeof(sc->page_key));
    for (size_t k = 0; k < n; k++) {
        if (len[k] == 0)
            continue;
        for (uint64_t p = from[k] / SSL_PAGE; p <= (from[k] + len[k] - 1) / SSL_PAGE; p++) {
            /* (the bytes of the page the piece has: the page's span read grows to take them) */
            uint64_t lo = p == from[k] / SSL_PAGE ? from[k] % SSL_PAGE : 0;
            uint64_t hi = p == (from[k] + len[k] - 1) / SSL_PAGE ? (from[k] + len[k] - 1) % SSL_PAGE + 1 : SSL_PAGE;
            size_t slot = page_hash_slot(sc, p);
            if (sc->page_key[slot] != 0) {
                size_t i = sc->page_slot[slot];
                uint64_t at = sc->page_from[i] % SSL_PAGE, end = at + sc->page_len[i];
                at = lo < at ? lo : at;
                end = hi > end ? hi : end;
                sc->page_from[i] = p * SSL_PAGE + at;
                sc->page_len[i] = (size_t)(end - at);
                sc->page_to[i] = sc->pages + i * SSL_PAGE + at;
                continue;
            }
            if (u == SSL_PAGE_SLOTS) {
                read_pieces(sc->pid, n, from, len, to, ok);
                return;
            }
            sc->page_key[slot] = p + 1;
            sc->page_slot[slot] = (uint16_t)u;
            sc->page_from[u] = p * SSL_PAGE + lo;
            sc->page_len[u] = (size_t)(hi - lo);
            sc->page_to[u] = sc->pages + u * SSL_PAGE + lo;
            u++;
        }
    }
    /* (each page's span only: a piece is mostly a chunk's 16-byte header, and copying whole
     * pages was the kernel's most time in the scan) */
    read_pieces(sc->pid, u, sc->page_from, sc->page_len, sc->page_to, sc->page_ok);
    for (size_t k = 0; k < n; k++) {
        uint64_t at = from[k];
        size_t left = len[k];
        unsigned char *out = to[k];
        ok[k] = 1;
        while (left > 0) {
            size_t slot = page_hash_slot(sc, at / SSL_PAGE);
            size_t i = sc->page_slot[slot];
            if (sc->page_key[slot] == 0 || !sc->page_ok[i]) {
                ok[k] = 0;
                break;
            }
            size_t offset = (size_t)(at % SSL_PAGE), take = SSL_PAGE - offset < left ? SSL_PAGE - offset : left;
            memcpy(out, sc->pages + i * SSL_PAGE + offset, take);
            out += take;
            at += take;
            left -= take;
        }
    }
}

/* The size of glibc's chunk for an allocation of ``bytes`` (malloc's request2size), or of
 * the chunk it mmaps for it on its own (a page multiple, with its header). */
static uint64_t
chunk_size_of(uint64_t bytes, int mmapped)
{
    uint64_t size = (bytes + 8 + 15) & ~(uint64_t)15;
    if (size < 32)
        size = 32;
    return mmapped ? (size + 8 + 4095) & ~(uint64_t)4095 : size;
}

/* Whether a chunk of ``size`` bytes is one malloc gave for ``bytes``: the request rounded, or
 * 16 bytes more (an arena's free chunk is given whole when what would be left is smaller than
 * a chunk: a Rust table of 1,616 bytes in a chunk of 1,648 was missed in one heap layout). */
static int
chunk_fits(uint64_t size, uint64_t bytes, int mmapped)
{
    uint64_t want = chunk_size_of(bytes, mmapped);
    return size == want || (!mmapped && size == want + 16);
}

/* The bytes a chunk of ``size`` at ``chunk`` counts: of a chunk of CHUNK_RESIDENT_MIN bytes or
 * more, those in RAM (count_resident, read before any of its words is: a page never written
 * is in no RSS, and a read would map the zero page there); its size where pagemap cannot be
 * read. 40 MuJoCo MjData, each with a 15 MB arena (for contacts) mostly never written, were
 * counted 634 MB in a process of 97 MB RSS ("native buffers 642% of RSS"): glibc gives such
 * a buffer from its heap once its mmap threshold has grown, or maps it on its own. */
#define CHUNK_RESIDENT_MIN ((uint64_t)64 << 10)
static uint64_t
chunk_counted(uint64_t chunk, uint64_t size)
{
    if (size < CHUNK_RESIDENT_MIN)
        return size;
    long long shared, resident = count_resident((uintptr_t)chunk, size, &shared);
    return resident >= 0 && (uint64_t)resident <= size ? (uint64_t)resident : size;
}

/* The candidates' headers read (the chunk's size word, then the next chunk's), and each that
 * starts a live glibc arena chunk of SSL_MAX_CHUNK bytes at most, not seen yet, made its
 * owner's (in the order met: the first at a depth wins), to be read at the next depth. */
static void
scan_flush(Scan *sc)
{
    size_t n = sc->ncand;
    sc->ncand = 0;
    for (size_t k = 0; k < n; k++) {
        sc->from[k] = sc->cand[k] - 16;
        sc->len[k] = 16;
        sc->to[k] = sc->head[k];
    }
    read_paged(sc, n, sc->from, sc->len, sc->to, sc->ok);
    size_t m = 0;
    uint64_t most = sc->max_chunk > SSL_MAX_GLOBAL_CHUNK ? sc->max_chunk : SSL_MAX_GLOBAL_CHUNK;
    for (size_t k = 0; k < n; k++) {
        uint64_t chunk = sc->cand[k] - 16;
        uint64_t mmapped = sc->ok[k] && sc->mmapped_ok ? glibc_mmapped_size(chunk, sc->cand_range[k], sc->head[k]) : 0;
        sc->cand_mmapped[k] = mmapped != 0;
        uint64_t size = !sc->ok[k] ? 0 : mmapped ? mmapped
                        : glibc_arena_size((uintptr_t)chunk, sc->cand_range[k], sc->head[k][1]);
        sc->size[k] = size <= (sc->cand_owner[k] < 0 ? most : sc->max_chunk) ? size : 0;
        if (sc->size[k] == 0 && sc->cand_mmapped[k] && size <= sc->max_counted)
            sc->size[k] = size;  /* (counted below, its words not read: a compressor's window) */
        if (sc->cand_expect[k] != 0 && !chunk_fits(size, sc->cand_expect[k], sc->cand_mmapped[k]))
            sc->size[k] = 0;
        if (sc->size[k] == 0 || sc->cand_mmapped[k])
            continue;
        sc->from[m] = chunk + size + 8;
        sc->len[m] = 8;
        sc->to[m] = &sc->after[k];
        m++;
    }
    read_paged(sc, m, sc->from, sc->len, sc->to, sc->ok);
    size_t j = 0;
    for (size_t k = 0; k < n && !sc->failed; k++) {
        if (sc->size[k] == 0)
            continue;
        uint64_t chunk = sc->cand[k] - 16, size = sc->size[k];
        if (!sc->cand_mmapped[k]) {
            int next_ok = sc->ok[j++];
            if (!next_ok || !glibc_arena_next_ok((uintptr_t)chunk, sc->head[k], size, sc->cand_range[k], sc->after[k]))
                continue;
        }
        unsigned char bit;
        unsigned char *byte = seen_byte(&sc->seen, chunk, 1, &bit, &sc->failed);
        if (byte == NULL || (*byte & bit))
            continue;  /* (met twice in this batch: the first's) */
        if (!sc->cand_mmapped[k]) {
            /* Inside an arena chunk an object took already: a pointer into its bytes (read as
             * a header there), no chunk of glibc's. The real one is met through its owner's
             * pointer to its start, most often before any pointer into it. (A chunk the
             * globals took covers nothing: a stale word of theirs may read a "chunk" around
             * an object's.) */
            unsigned char cbit;
            const unsigned char *cbyte = seen_byte(&sc->covered, chunk, 0, &cbit, &sc->failed);
            if (cbyte != NULL && (*cbyte & cbit))
                continue;
        }
        int32_t owner = sc->cand_owner[k];
        if (++sc->chunks > sc->max_chunks
            || mapping_grow(&sc->next, (sc->nnext + 2) * sizeof(uint64_t), sc->seen.budget, sc->seen.held) < 0) {
            sc->failed = 1;
            return;
        }
        *byte |= bit;
        if (owner >= 0 && !sc->cand_mmapped[k] && seen_mark(&sc->covered, chunk + 16, chunk + size, &sc->failed) < 0)
            return;
        uint64_t counted = owner >= 0 ? chunk_counted(chunk, size) : size;
        if (size > sc->max_chunk) {  /* counted, not read (the globals': no object's) */
            if (owner >= 0)
                sc->totals[owner] += (long long)counted;
            continue;
        }
        uint64_t *entries = (uint64_t *)sc->next.data;
        if (owner != sc->next_owner) {
            entries[sc->nnext++] = ENTRY_OWNER | (uint64_t)(uint32_t)(owner + 1);
            sc->next_owner = owner;
        }
        entries[sc->nnext++] = entry_of(chunk, size);
        if (owner >= 0)
            sc->totals[owner] += (long long)counted;
    }
    /* what the tables use now: the two depths' mappings as far as written, the bitmaps and
     * their table */
    if (sc->nnext > sc->next_written)
        sc->next_written = sc->nnext;
    long long used = sc->fixed + (long long)(sc->next_written + sc->level_written) * 8
                     + (long long)(sc->seen.regions + sc->covered.regions) * SSL_REGION_BYTES
                     + (sc->seen.keys.data != NULL ? (long long)(sc->seen.mask + 1) * 12 : 0)
                     + (sc->covered.keys.data != NULL ? (long long)(sc->covered.mask + 1) * 12 : 0);
    if (used > scan_peak)
        scan_peak = used;
}

/* ``p``, ``owner``'s: a candidate if it may start a chunk not seen yet (its header is read
 * with the batch's), that of an allocation of ``expect`` bytes (0: any). */
static void
scan_candidate(Scan *sc, uint64_t p, int32_t owner, uint64_t expect)
{
    if ((p & 15) != 0 || p < 4096 + 16 || p - 16 >= ENTRY_MAX_CHUNK)  /* (an entry's address bits) */
        return;
    uint64_t chunk = p - 16;
    /* (the range of the last word that was in one first: a chunk's words point near each
     * other; a binary search over a worker's hundreds of ranges was ~4% of the scan's time) */
    const HeapRange *r = sc->last_range;
    if (r == NULL || chunk < r->start || chunk >= r->end) {
        r = heap_range_of(sc->ranges, sc->nranges, (uintptr_t)chunk);
        if (r == NULL)
            return;
        sc->last_range = r;
    }
    unsigned char bit;
    unsigned char *byte = seen_byte(&sc->seen, chunk, 0, &bit, &sc->failed);
    if (byte != NULL && (*byte & bit))
        return;
    sc->cand[sc->ncand] = p;
    sc->cand_owner[sc->ncand] = owner;
    sc->cand_range[sc->ncand] = r;
    sc->cand_expect[sc->ncand] = expect;
    if (++sc->ncand == SSL_CANDIDATES)
        scan_flush(sc);
}

/* The word ``p``, ``owner``'s: a candidate if it may start a chunk not seen yet; with
 * ``tagged_pointers``, one with flags in its low three bits too, less them (protobuf's
 * repeated fields and strings: a pointer to an allocation + 1, 2 or 3; sentencepiece's model
 * was 0.13 of what freeing its processors returns without them). */
static void
scan_word(Scan *sc, uint64_t p, int32_t owner)
{
    scan_candidate(sc, p, owner, 0);
    if (sc->tagged_pointers && (p & 7) != 0 && (p & 15) < 8)
        scan_candidate(sc, p & ~(uint64_t)7, owner, 0);
}

/* Rust's hash tables (hashbrown's, every HashMap and HashSet's) keep a pointer into their
 * allocation, not to its start: (bucket_mask, ctrl, growth_left, items), ctrl past the
 * buckets, each bucket_mask + 1 of them sizeof(T) bytes (then the control bytes: one a
 * bucket, and 16). A model's serializer keeps its fields in one (pydantic-core): ~60% of
 * its heap. Where four words (either of the first two orders) look like one, the allocation
 * is looked for at ctrl less the buckets of each size of T that is a multiple of 8, up to
 * RUST_TABLE_MAX_ITEM: a chunk must start there of exactly the size malloc gives that
 * allocation. */
#define RUST_TABLE_MAX_ITEM 1024
#define RUST_TABLE_MAX_BUCKETS ((uint64_t)1 << 24)

static void
scan_rust_table(Scan *sc, uint64_t mask, uint64_t ctrl, uint64_t growth, uint64_t items, int32_t owner)
{
    if ((ctrl & 15) != 0 || ctrl < 4096 || mask < 3 || mask >= RUST_TABLE_MAX_BUCKETS || (mask & (mask + 1)) != 0)
        return;
    uint64_t buckets = mask + 1;
    uint64_t capacity = mask < 8 ? mask : buckets / 8 * 7;
    if (items > capacity || growth > capacity - items)
        return;
    for (uint64_t size = 8; size <= RUST_TABLE_MAX_ITEM && !sc->failed; size += 8) {
        uint64_t offset = (buckets * size + 15) & ~(uint64_t)15;
        if (offset >= ctrl)
            break;
        scan_candidate(sc, ctrl - offset, owner, offset + buckets + 16);
    }
}

/* ``n`` words, ``owner``'s: each a candidate, and where the scan looks for them, Rust's hash
 * tables among them. */
static void
scan_words(Scan *sc, const uint64_t *w, size_t n, int32_t owner)
{
    for (size_t j = 0; j < n && !sc->failed; j++) {
        scan_word(sc, w[j], owner);
        if (sc->rust_tables && j + 3 < n && w[j + 2] <= RUST_TABLE_MAX_BUCKETS && w[j + 3] <= RUST_TABLE_MAX_BUCKETS) {
            if (w[j] < RUST_TABLE_MAX_BUCKETS)
                scan_rust_table(sc, w[j], w[j + 1], w[j + 2], w[j + 3], owner);
            else if (w[j + 1] < RUST_TABLE_MAX_BUCKETS)
                scan_rust_table(sc, w[j + 1], w[j], w[j + 2], w[j + 3], owner);
        }
    }
}

/* A type's tp_flags: the 22nd word of PyTypeObject (3.8-3.13), checked against type's own
 * (type_flags_known) before it is read in another's. */
#define TYPE_FLAGS_OFFSET 168
static int type_flags_known = -1;

static void
check_type_flags_offset(void)
{
    if (type_flags_known < 0)
        type_flags_known = *(const unsigned long *)((const char *)&PyType_Type + TYPE_FLAGS_OFFSET)
                           == PyType_GetFlags(&PyType_Type);
}

/* Which of the ``n`` chunks read (their words at ``words[k]``, ``nwords[k]`` of them, ok[k]
 * where read) are Python objects: object[k] 1 where its type word (after the object's header,
 * a GC header, or 3.12+'s pre-header: words 1, 3, 5) is a type's or a metatype's. */
static void
scan_objects(Scan *sc, size_t n, uint64_t *const *words, const size_t *nwords, const unsigned char *read_ok,
             unsigned char *object)
{
    static const int at[3] = {1, 3, 5};
    uint64_t *meta = sc->after;   /* (the candidates' arrays are free between two flushes) */
    size_t m = 0;
    for (size_t k = 0; k < n; k++) {
        object[k] = 0;
        for (int a = 0; a < 3 && read_ok[k] && sc->batch_size[k] >= sc->object_min; a++) {
            uint64_t tp = (size_t)at[a] < nwords[k] ? words[k][at[a]] : 0;
            if (tp < 4096 || (tp & 7) != 0 || m >= SSL_CANDIDATES)
                continue;
            sc->from[m] = tp + 8;
            sc->len[m] = 8;
            sc->to[m] = &meta[m];
            sc->cand_owner[m] = (int32_t)k;
            m++;
        }
    }
    read_paged(sc, m, sc->from, sc->len, sc->to, sc->ok);
    /* a metatype's type and flags: read where the first was no type (a word that points at
     * any other object, a str a Rust struct keeps, reaches ``type`` in two steps too: the
     * second must be a metatype, a subclass of type), half a candidates' array at a time */
    uint64_t *metameta = sc->size, *metaflags = sc->head[0];
    unsigned char *looked = sc->read_ok_meta;
    for (size_t j = 0; j < m; j++)
        looked[j] = sc->ok[j] && meta[j] != sc->type_type && meta[j] >= 4096 && (meta[j] & 7) == 0;
    for (size_t j = 0; j < m; j++)
        if (sc->ok[j] && meta[j] == sc->type_type)
            object[sc->cand_owner[j]] = 1;
    size_t start = 0;
    while (start < m) {
        size_t q = 0, j = start;
        for (; j < m && 2 * q + 2 <= SSL_CANDIDATES; j++) {
            if (!looked[j])
                continue;
            sc->cand[q] = (uint64_t)sc->cand_owner[j];
            sc->from[2 * q] = meta[j] + 8;
            sc->len[2 * q] = 8;
            sc->to[2 * q] = &metameta[q];
            sc->from[2 * q + 1] = meta[j] + TYPE_FLAGS_OFFSET;
            sc->len[2 * q + 1] = 8;
            sc->to[2 * q + 1] = &metaflags[q];
            q++;
        }
        start = j;
        read_paged(sc, 2 * q, sc->from, sc->len, sc->to, sc->meta_ok);
        for (size_t k = 0; k < q; k++)
            if (sc->meta_ok[2 * k] && metameta[k] == sc->type_type
                && (type_flags_known != 1 || (sc->meta_ok[2 * k + 1] && (metaflags[k] & Py_TPFLAGS_TYPE_SUBCLASS))))
                object[sc->cand[k]] = 1;
    }
}

/* ``len`` bytes at ``at`` (at most SSL_BATCH_BYTES) into ``to``, the pages not in RAM as the
 * zeros they hold unread: a read would map the zero page there (the pages of a buffer never
 * written, which chunk_counted does not count, would read as present at the next
 * inspection). 0, or -1 where it cannot be read. */
#define PRESENT_PAGES (SSL_BATCH_BYTES / SSL_PAGE + 2)
static int
read_present(uint64_t *to, uint64_t at, size_t len)
{
    uint64_t first = at / SSL_PAGE, last = (at + len - 1) / SSL_PAGE, entries[PRESENT_PAGES];
    size_t pages = (size_t)(last - first + 1);
    int fd = pages <= PRESENT_PAGES ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return self_read(to, (uintptr_t)at, len);
    ssize_t got = pread(fd, entries, pages * 8, (off_t)(first * 8));
    close(fd);
    if (got != (ssize_t)(pages * 8))
        return self_read(to, (uintptr_t)at, len);
    unsigned char *out = (unsigned char *)to;
    for (size_t k = 0; k < pages;) {
        /* a run of pages alike: read in one call, or zeros */
        size_t j = k + 1;
        while (j < pages && (entries[j] >> 63) == (entries[k] >> 63))
            j++;
        uint64_t low = (first + k) * SSL_PAGE, high = (first + j) * SSL_PAGE;
        if (low < at)
            low = at;
        if (high > at + len)
            high = at + len;
        if (!(entries[k] >> 63))
            memset(out + (low - at), 0, (size_t)(high - low));
        else if (self_read(out + (low - at), (uintptr_t)low, (size_t)(high - low)) < 0)
            return -1;
        k = j;
    }
    return 0;
}

/* The chunk of ``size`` bytes whose bytes start at ``at`` (over SSL_BATCH_BYTES), ``owner``'s:
 * no Python object (its first words read as scan_objects reads a batch's), its words scanned
 * a batch's bytes at a time (the last ones of an mmapped chunk's mapping left out). */
static void
scan_big_chunk(Scan *sc, uint64_t at, uint64_t size, int32_t owner, unsigned char *buffer)
{
    size_t total = (size - 16) & ~(size_t)7, done = 0;
    while (done < total && !sc->failed) {
        size_t len = total - done < SSL_BATCH_BYTES ? total - done : SSL_BATCH_BYTES;
        uint64_t *words = (uint64_t *)buffer;
        if (read_present(words, at + done, len) < 0)
            return;
        if (done == 0) {
            sc->batch_size[0] = size;
            size_t n = len / 8;
            unsigned char ok = 1, object = 0;
            uint64_t *first[1] = {words};
            scan_objects(sc, 1, first, &n, &ok, &object);
            if (object) {
                if (owner >= 0)
                    sc->totals[owner] -= (long long)chunk_counted(at - 16, size);
                return;
            }
        }
        scan_words(sc, words, len / 8, owner);
        if (sc->ncand > 0 && !sc->failed)
            scan_flush(sc);
        done += len;
    }
}

/* Every depth in turn until none is left: its chunks read a batch at a time, each one's words
 * scanned for the next depth's. */
static void
scan_depths(Scan *sc, unsigned char *buffer)
{
    uint64_t **words = sc->words, *from = sc->batch_from;
    size_t *nwords = sc->nwords, *bytes = sc->bytes;
    unsigned char *read_ok = sc->read_ok, *object = sc->object;
    Mapping level = {0};
    while (sc->nnext > 0 && !sc->failed) {
        /* this depth's entries out of ``next`` */
        Mapping swap = level;
        level = sc->next;
        sc->next = swap;
        size_t count = sc->nnext, written = sc->level_written;
        sc->level_written = sc->next_written;
        sc->next_written = written;
        sc->nnext = 0;
        sc->next_owner = INT64_MIN;
        const uint64_t *entries = (const uint64_t *)level.data;
        int32_t owner = -1;
        size_t i = 0;
        while (i < count && !sc->failed) {
            if (now() > sc->deadline) {
                sc->failed = 1;
                break;
            }
            /* a batch: each chunk's bytes, its size less its header and with the next
             * chunk's prev_size (this chunk's while it is in use) */
            size_t b = 0, used = 0;
            for (; i < count && b < SSL_BATCH_ITEMS; i++) {
                uint64_t e = entries[i];
                if (e & ENTRY_OWNER) {
                    owner = (int32_t)(uint32_t)(e & 0xFFFFFFFFu) - 1;
                    continue;
                }
                uint64_t size = ((e >> ENTRY_ADDRESS_BITS) & 0xFFFFF) << 4;
                size_t len = (size - 8) & ~(size_t)7;
                if (len > SSL_BATCH_BYTES || size >= CHUNK_RESIDENT_MIN) {
                    /* a big chunk (a struct scan's: a Rust table of thousands of entries) is
                     * read alone, a batch's bytes at a time, its pages in RAM only */
                    if (b > 0)
                        break;
                    scan_big_chunk(sc, ((e & (((uint64_t)1 << ENTRY_ADDRESS_BITS) - 1)) << 4) + 16, size, owner,
                                   buffer);
                    continue;
                }
                if (used + len > SSL_BATCH_BYTES)
                    break;
                sc->batch_size[b] = size;
                sc->batch_owner[b] = owner;
                words[b] = (uint64_t *)(buffer + used);
                nwords[b] = len / 8;
                bytes[b] = len;
                from[b] = ((e & (((uint64_t)1 << ENTRY_ADDRESS_BITS) - 1)) << 4) + 16;  /* (the chunk's bytes) */
                used += len;
                b++;
            }
            read_paged(sc, b, from, bytes, (void *const *)words, read_ok);
            scan_objects(sc, b, words, nwords, read_ok, object);
            for (size_t k = 0; k < b && !sc->failed; k++) {
                if (!read_ok[k])
                    continue;
                if (object[k]) {
                    if (sc->batch_owner[k] >= 0)
                        sc->totals[sc->batch_owner[k]] -= (long long)sc->batch_size[k];  /* (< CHUNK_RESIDENT_MIN) */
                    continue;
                }
                scan_words(sc, words[k], nwords[k], sc->batch_owner[k]);
            }
            if (sc->ncand > 0 && !sc->failed)
                scan_flush(sc);
        }
    }
    mapping_free(&level, sc->seen.held);
    sc->level_written = 0;
}

/* -- OpenSSL's globals ------------------------------------------------------------------- */

#define SSL_MAX_ROOTS 32

typedef struct {
    const char *own;        /* _ssl's file, or NULL */
    int found;              /* libssl or libcrypto met */
    int n;
    uint64_t at[SSL_MAX_ROOTS][2];
    uint64_t own_at[SSL_MAX_ROOTS][2];
    int nown;
} Roots;

static int
roots_of_object(struct dl_phdr_info *info, size_t Py_UNUSED(size), void *arg)
{
    Roots *roots = arg;
    const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
    const char *base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    int openssl = strncmp(base, "libssl", 6) == 0 || strncmp(base, "libcrypto", 9) == 0;
    int own = !openssl && roots->own != NULL && name[0] != 0 && strcmp(name, roots->own) == 0;
    if (!openssl && !own)
        return 0;
    roots->found |= openssl;
    for (int k = 0; k < info->dlpi_phnum; k++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W) || ph->p_memsz == 0)
            continue;
        uint64_t start = (uint64_t)(info->dlpi_addr + ph->p_vaddr), end = start + (uint64_t)ph->p_memsz;
        if (openssl && roots->n < SSL_MAX_ROOTS) {
            roots->at[roots->n][0] = start;
            roots->at[roots->n++][1] = end;
        }
        else if (own && roots->nown < SSL_MAX_ROOTS) {
            roots->own_at[roots->nown][0] = start;
            roots->own_at[roots->nown++][1] = end;
        }
    }
    return 0;
}

/* OpenSSL's writable data (.data and .bss, as the loader mapped them: the loaded objects'
 * program headers): libssl's and libcrypto's, or where neither is loaded the one object
 * OpenSSL is linked into (``own``: _ssl's file); 0 pairs where there is neither. */
static int
openssl_roots(const char *own, Roots *roots)
{
    memset(roots, 0, sizeof(*roots));
    roots->own = own;
    dl_iterate_phdr(roots_of_object, roots);
    if (roots->found)
        return roots->n;
    memcpy(roots->at, roots->own_at, sizeof(roots->at));
    roots->n = roots->nown;
    return roots->n;
}

/* This thread's descriptor (glibc's struct pthread, where its thread-specific values are:
 * OpenSSL's per-thread state, its random generators among them, which the first context
 * made) as one more root, where there are any. */
static void
thread_root(Roots *roots)
{
    if (roots->n > 0 && roots->n < SSL_MAX_ROOTS) {
        uint64_t self = (uint64_t)(uintptr_t)pthread_self();
        roots->at[roots->n][0] = self;
        roots->at[roots->n++][1] = self + 1536;  /* (specific_1stblock: within its first 1,300 bytes) */
    }
}

/* The scan's state in ``sc`` (a new mapping's zeros), its tables within ``max_bytes``
 * (``held`` what its buffers use already, counted in *heldp from now on). */
static void
scan_init(Scan *sc, unsigned char *pages, const char *ranges, Py_ssize_t nranges, long long *totals,
          Py_ssize_t small_max, long long max_chunks, long long max_bytes, double seconds, long long *heldp)
{
    sc->pages = pages;
    sc->pid = getpid();
    sc->ranges = (const HeapRange *)ranges;
    sc->nranges = nranges / (Py_ssize_t)sizeof(HeapRange);
    glibc_heaps_forget();
    sc->totals = totals;
    sc->max_chunks = max_chunks;
    sc->type_type = (uint64_t)(uintptr_t)&PyType_Type;
    /* an object of small_max bytes or fewer is pymalloc's: a chunk of malloc's holds a bigger
     * one, small_max + 16 bytes at least with its header (0: every object is malloc's) */
    sc->object_min = small_max > 0 ? (uint64_t)small_max + 16 : 0;
    sc->deadline = now() + seconds;
    sc->fixed = *heldp;  /* (its buffers, mapped before and used whole) */
    scan_peak = *heldp;
    sc->seen.budget = sc->covered.budget = max_bytes;
    sc->seen.held = sc->covered.held = heldp;
    sc->next_owner = INT64_MIN;
    sc->max_chunk = SSL_MAX_CHUNK;
}

/* The candidates left checked, then every depth from them. */
static void
scan_rest(Scan *sc, unsigned char *buffer)
{
    if (sc->ncand > 0 && !sc->failed)
        scan_flush(sc);
    scan_depths(sc, buffer);
}

/* A global's pointer into an arena chunk, past its start (a table's name or a blob's
 * contents, 9 bytes in: sentencepiece's 2.3 MB chunk, which only its globals hold so): the
 * chunk whose header is the nearest before it, within GLOBAL_INTERIOR_BACK bytes, that covers
 * it, made a candidate of the globals'. Otherwise no one took it, and a stale word of an
 * object's that once pointed at its start did, one run in ~150 on a loaded machine (10-14%
 * more than freeing 20 processors returns). */
#define GLOBAL_INTERIOR_BACK 512
/* (a read each: a library with megabytes of globals pointing into the heap stops there) */
#define GLOBAL_INTERIOR_MAX 65536

static void
scan_global_interior(Scan *sc, uint64_t p)
{
    if (p < 4096 + 32 || p - 16 >= ENTRY_MAX_CHUNK || sc->interior_reads >= GLOBAL_INTERIOR_MAX)
        return;
    const HeapRange *r = heap_range_of(sc->ranges, sc->nranges, (uintptr_t)p);
    if (r == NULL || p - r->start < 32)
        return;
    sc->interior_reads++;
    uint64_t top = (p - 17) & ~(uint64_t)15;  /* the nearest chunk start whose data starts before p */
    uint64_t low = p - r->start > GLOBAL_INTERIOR_BACK ? p - GLOBAL_INTERIOR_BACK : r->start;
    low = (low + 15) & ~(uint64_t)15;
    if (top < low)
        return;
    uint64_t back[GLOBAL_INTERIOR_BACK / 8 + 2];
    size_t len = (size_t)(top + 16 - low);
    if (self_read(back, (uintptr_t)low, len) < 0)
        return;
    for (uint64_t chunk = top;; chunk -= 16) {
        uint64_t size = glibc_arena_size((uintptr_t)chunk, r, back[(chunk - low) / 8 + 1]);
        if (size != 0 && chunk + size > p) {
            scan_candidate(sc, chunk + 16, -1, 0);
            return;
        }
        if (chunk == low)
            return;
    }
}

/* The libraries' globals first (``found``'s writable data): what they reach is no object's.
 * The GIL released. */
static void
scan_globals(Scan *sc, const Roots *found, unsigned char *buffer)
{
    for (int k = 0; k < found->n && !sc->failed; k++) {
        uint64_t at = found->at[k][0] & ~(uint64_t)7, end = found->at[k][1];
        if (end < at || end - at > ((uint64_t)16 << 20))
            continue;
        for (; at + 8 <= end && !sc->failed; at += SSL_ROOT_READ) {
            size_t len = end - at < SSL_ROOT_READ ? (size_t)(end - at) & ~(size_t)7 : SSL_ROOT_READ;
            uint64_t *words = (uint64_t *)(buffer + SSL_BATCH_BYTES);
            if (self_read(words, (uintptr_t)at, len) < 0)
                continue;
            scan_words(sc, words, len / 8, -1);
            for (size_t j = 0; j < len / 8 && !sc->failed; j++)
                scan_global_interior(sc, words[j]);
        }
    }
    scan_rest(sc, buffer);
}

/* The scan's tables of chunks freed (its buffers are the caller's). */
static void
scan_done(Scan *sc, long long *held)
{
    mapping_free(&sc->next, held);
    seen_free(&sc->seen);
    seen_free(&sc->covered);
}

/* The objects' totals (``n`` int64s), or None where the scan failed. */
static PyObject *
totals_answer(int failed, const long long *totals, Py_ssize_t n)
{
    if (failed)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)totals, n * (Py_ssize_t)sizeof(long long));
}

PyDoc_STRVAR(ssl_object_bytes_doc,
"ssl_object_bytes(objects, context_type, socket_type, ranges, ssl_file, small_max, max_chunks,\n"
"                 max_bytes, seconds) -> bytes or None\n\n"
"The bytes of OpenSSL's heap each object's SSL_CTX (an _ssl._SSLContext, ``context_type``) or\n"
"SSL (an _ssl._SSLSocket, ``socket_type`` or None: one whose SSL holds its context's SSL_CTX)\n"
"reaches first, as int64s in their order (any other object: 0); ``ranges``: the heap's\n"
"(sizes._heap_ranges). What libssl's and libcrypto's writable data reach (or, where neither\n"
"is loaded, ``ssl_file``'s: _ssl's, OpenSSL linked in) is no object's; None where there is\n"
"neither, past ``max_chunks`` chunks, ``max_bytes`` of tables or ``seconds``. ``small_max``:\n"
"the biggest object pymalloc takes (0: none), no object's chunk is smaller. The scan runs\n"
"with the GIL released; the list keeps the objects (and their SSL_CTX and SSL) alive\n"
"meanwhile. Runs no Python code.");

/* Whether the SSL at ``ssl`` (a live glibc chunk of SSL_MAX_CHUNK bytes at most) holds
 * ``ssl_ctx`` (its context's SSL_CTX: an SSL keeps it, OpenSSL 3.0's twice) among its words. */
static int
ssl_holds_its_context(Scan *sc, uint64_t ssl, uint64_t ssl_ctx, uint64_t *buffer)
{
    const HeapRange *r = (ssl & 15) == 0 && ssl > 16 ? heap_range_of(sc->ranges, sc->nranges, (uintptr_t)ssl - 16)
                                                     : NULL;
    int64_t offset;
    uint64_t size = r != NULL ? glibc_chunk_header((uintptr_t)ssl - 16, r, &offset) : 0;
    if (size == 0 || offset >= 0 || size > SSL_MAX_CHUNK || ssl_ctx == 0
        || self_read(buffer, (uintptr_t)ssl, (size - 8) & ~(uint64_t)7) < 0)
        return 0;
    for (uint64_t w = 0; w < (size - 8) / 8; w++)
        if (buffer[w] == ssl_ctx)
            return 1;
    return 0;
}

static PyObject *
ssl_object_bytes(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* (the bytes objects stay alive while the GIL is released: the call's arguments hold them) */
    PyObject *list, *cls, *socket_cls;
    const char *ranges, *ssl_file;
    Py_ssize_t nranges, small_max;
    long long max_chunks, max_bytes;
    double seconds;
    if (!PyArg_ParseTuple(args, "O!O!Oy#znLLd:ssl_object_bytes", &PyList_Type, &list, &PyType_Type, &cls, &socket_cls,
                          &ranges, &nranges, &ssl_file, &small_max, &max_chunks, &max_bytes, &seconds))
        return NULL;
    if (socket_cls != Py_None && !PyType_Check(socket_cls)) {
        PyErr_SetString(PyExc_TypeError, "socket_type: a type or None");
        return NULL;
    }
    /* OpenSSL's data, looked up with the GIL held: the loader's write lock (dl_iterate_phdr
     * holds it for the loop) is never held by a thread that waits for the GIL, and no
     * os.fork() can copy it held meanwhile */
    Roots found;
    if (openssl_roots(ssl_file, &found) == 0)
        Py_RETURN_NONE;  /* (what OpenSSL's globals reach would count as the contexts') */
    thread_root(&found);
    check_type_flags_offset();
    PyObject *out = NULL;
    Py_ssize_t n = PyList_Size(list);
    long long *totals = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(long long));
    /* Each context's SSL_CTX: the word after its object's header (PySSLContext, 3.10-3.13).
     * Each socket's SSL: the word after its socket's weak reference (PySSLSocket, 3.10-3.13),
     * then its context (a strong reference), whose SSL_CTX the SSL must hold (checked with
     * the GIL released: ssl_holds_its_context). */
    uint64_t *ctx = PyMem_Calloc(n > 0 ? (size_t)n : 1, 2 * sizeof(uint64_t));
    for (Py_ssize_t i = 0; ctx != NULL && i < n; i++) {
        PyObject *obj = PyList_GetItem(list, i);
        if (obj != NULL && PyObject_TypeCheck(obj, (PyTypeObject *)cls))
            ctx[2 * i] = *(const uint64_t *)((const char *)obj + sizeof(PyObject));
        else if (obj != NULL && socket_cls != Py_None && PyObject_TypeCheck(obj, (PyTypeObject *)socket_cls)) {
            const char *at = (const char *)obj + sizeof(PyObject) + sizeof(PyObject *);
            PyObject *context = *(PyObject *const *)(at + sizeof(void *));
            if (context != NULL && PyObject_TypeCheck(context, (PyTypeObject *)cls)) {
                ctx[2 * i] = *(const uint64_t *)at;
                ctx[2 * i + 1] = *(const uint64_t *)((const char *)context + sizeof(PyObject));
            }
        }
    }
    Mapping scan = {0}, buffer = {0}, pages = {0};
    Scan *sc = NULL;
    int failed = 0;
    long long held = 0;
    scan_peak = 0;
    if (totals == NULL || ctx == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* (its own tables within the budget too: over it, no scan) */
    if (mapping_grow(&scan, sizeof(Scan), max_bytes, &held) < 0
        || mapping_grow(&buffer, SSL_BATCH_BYTES + SSL_ROOT_READ, max_bytes, &held) < 0
        || mapping_grow(&pages, SSL_PAGE_SLOTS * SSL_PAGE, max_bytes, &held) < 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    sc = (Scan *)scan.data;  /* (a new mapping's zeros) */
    scan_init(sc, pages.data, ranges, nranges, totals, small_max, max_chunks, max_bytes, seconds, &held);
    Py_BEGIN_ALLOW_THREADS
    /* OpenSSL's globals first: what they reach is no context's */
    scan_globals(sc, &found, buffer.data);
    /* then every context's SSL_CTX and socket's SSL, the first depth of all */
    for (Py_ssize_t i = 0; i < n && !sc->failed; i++)
        if (ctx[2 * i + 1] == 0 || ssl_holds_its_context(sc, ctx[2 * i], ctx[2 * i + 1], (uint64_t *)buffer.data))
            scan_word(sc, ctx[2 * i], (int32_t)i);
    scan_rest(sc, buffer.data);
    failed = sc->failed;
    scan_done(sc, &held);
    Py_END_ALLOW_THREADS
    out = totals_answer(failed, totals, n);
done:
    PyMem_Free(totals);
    PyMem_Free(ctx);
    mapping_free(&buffer, &held);
    mapping_free(&pages, &held);
    mapping_free(&scan, &held);
    return out;
}

/* -- C types whose state is behind their struct's pointers --------------------------------- */

/* The writable data of the loaded object ``file`` (its globals), as roots_of_object does
 * OpenSSL's: 0 pairs where it is not loaded. */
static int
file_roots(const char *file, Roots *roots)
{
    memset(roots, 0, sizeof(*roots));
    roots->own = file;
    dl_iterate_phdr(roots_of_object, roots);  /* (OpenSSL's, if loaded, are set aside) */
    memcpy(roots->at, roots->own_at, sizeof(roots->at));
    roots->n = roots->nown;
    return roots->n;
}

/* A struct scan's chunks: up to what an entry can say (16 MiB: a Rust table of ~500,000
 * entries), mmapped ones too. */
#define STRUCT_MAX_CHUNK ((uint64_t)0xFFFFF << 4)
/* ... and a bigger one glibc mmapped, counted but not read, up to 1 GiB: a zstd compressor's
 * window and tables (~94 MB at level 19), which no object reached before. */
#define STRUCT_MAX_COUNTED ((uint64_t)1 << 30)

PyDoc_STRVAR(struct_object_bytes_doc,
"struct_object_bytes(objects, basicsizes, ranges, lib_file, small_max, max_chunks, max_bytes,\n"
"                    seconds) -> bytes or None\n\n"
"The bytes of the heap's glibc chunks each object's own struct reaches first (its words after\n"
"its header, to its basicsize: ``basicsizes``, int64s, one an object), as int64s in their\n"
"order: a C type that keeps its state behind pointers (pydantic-core's validators and\n"
"serializers: Rust's boxes and vectors, which sys.getsizeof does not count). What\n"
"``lib_file``'s writable data reach (its globals: caches every object uses) is no object's;\n"
"None where it is not loaded, past ``max_chunks`` chunks, ``max_bytes`` of tables or\n"
"``seconds``. ``ranges`` and ``small_max`` as ssl_object_bytes'. The structs are copied\n"
"with the GIL held, then scanned with it released; runs no Python code.");

static PyObject *
struct_object_bytes(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *list;
    const char *sizes, *ranges, *lib_file;
    Py_ssize_t nsizes, nranges, small_max;
    long long max_chunks, max_bytes;
    double seconds;
    if (!PyArg_ParseTuple(args, "O!y#y#snLLd:struct_object_bytes", &PyList_Type, &list, &sizes, &nsizes, &ranges,
                          &nranges, &lib_file, &small_max, &max_chunks, &max_bytes, &seconds))
        return NULL;
    Py_ssize_t n = PyList_Size(list);
    if (nsizes != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "basicsizes: one int64 an object");
        return NULL;
    }
    Roots found;
    if (file_roots(lib_file, &found) == 0)
        Py_RETURN_NONE;  /* (what its globals reach would count as the objects') */
    check_type_flags_offset();
    PyObject *out = NULL;
    long long *totals = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(long long));
    size_t *first = PyMem_Calloc((size_t)n + 1, sizeof(size_t));  /* object i's words: [first[i], first[i + 1]) */
    Mapping scan = {0}, buffer = {0}, pages = {0}, words = {0};
    Scan *sc = NULL;
    int failed = 0;
    long long held = 0;
    scan_peak = 0;
    if (totals == NULL || first == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t size;
        memcpy(&size, sizes + i * (Py_ssize_t)sizeof(int64_t), sizeof(size));
        size_t count = size > (int64_t)sizeof(PyObject) && size <= ((int64_t)1 << 20)
                           ? (size_t)(size - (int64_t)sizeof(PyObject)) / 8 : 0;
        first[i + 1] = first[i] + count;
    }
    if (mapping_grow(&scan, sizeof(Scan), max_bytes, &held) < 0
        || mapping_grow(&buffer, SSL_BATCH_BYTES + SSL_ROOT_READ, max_bytes, &held) < 0
        || mapping_grow(&pages, SSL_PAGE_SLOTS * SSL_PAGE, max_bytes, &held) < 0
        || mapping_grow(&words, (first[n] > 0 ? first[n] : 1) * 8, max_bytes, &held) < 0) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    /* each object's words, copied while the GIL keeps them as they are (the list keeps the
     * objects alive after; what their pointers reach is read with process_vm_readv) */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PyList_GetItem(list, i);
        if (obj != NULL && first[i + 1] > first[i])
            memcpy(words.data + first[i] * 8, (const char *)obj + sizeof(PyObject), (first[i + 1] - first[i]) * 8);
    }
    sc = (Scan *)scan.data;
    scan_init(sc, pages.data, ranges, nranges, totals, small_max, max_chunks, max_bytes, seconds, &held);
    sc->rust_tables = 1;
    sc->tagged_pointers = 1;
    sc->max_chunk = STRUCT_MAX_CHUNK;
    sc->mmapped_ok = 1;
    sc->max_counted = STRUCT_MAX_COUNTED;
    Py_BEGIN_ALLOW_THREADS
    /* What every object's struct points at first (its boxes: a stale word among the library's
     * globals took a tokenizer's whole model when the globals went first), then the library's
     * globals, then every depth of both at once: what the globals reach besides is no
     * object's. */
    const uint64_t *all = (const uint64_t *)words.data;
    for (Py_ssize_t i = 0; i < n && !sc->failed; i++)
        scan_words(sc, all + first[i], first[i + 1] - first[i], (int32_t)i);
    if (sc->ncand > 0 && !sc->failed)
        scan_flush(sc);
    scan_globals(sc, &found, buffer.data);
    failed = sc->failed;
    scan_done(sc, &held);
    Py_END_ALLOW_THREADS
    out = totals_answer(failed, totals, n);
done:
    PyMem_Free(totals);
    PyMem_Free(first);
    mapping_free(&words, &held);
    mapping_free(&buffer, &held);
    mapping_free(&pages, &held);
    mapping_free(&scan, &held);
    return out;
}

PyDoc_STRVAR(ssl_scan_peak_doc,
"ssl_scan_peak() -> bytes\n\n"
"The most the last ssl_object_bytes' tables used at once, as far as written (0: none run).");

static PyObject *
ssl_scan_peak(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(args))
{
    return PyLong_FromLongLong(scan_peak);
}

PyDoc_STRVAR(held_object_doc,
"held_object(obj, basicsize, offset, cls) -> object or None\n\n"
"The object of exactly ``cls`` whose pointer ``obj`` (of ``basicsize`` bytes) keeps at\n"
"``offset`` of its struct (a C type's reference its traversal does not show: a zstd\n"
"stream's compressor), or None. The pointer and the header it points at are read through\n"
"process_vm_readv (a layout that is not the expected one reads as no such object, never a\n"
"fault); runs no Python code.");

static PyObject *
held_object(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *obj, *cls;
    Py_ssize_t basicsize, offset;
    if (!PyArg_ParseTuple(args, "OnnO!:held_object", &obj, &basicsize, &offset, &PyType_Type, &cls))
        return NULL;
    if (offset < 16 || offset + 8 > basicsize || (offset & 7) != 0)
        Py_RETURN_NONE;
    uintptr_t p;
    uint64_t head[2];  /* ob_refcnt, ob_type */
    if (self_read(&p, (uintptr_t)obj + (uintptr_t)offset, sizeof(p)) < 0 || p < 4096 || (p & 7) != 0
        || self_read(head, p, sizeof(head)) < 0 || head[1] != (uint64_t)(uintptr_t)cls || (int64_t)head[0] <= 0)
        Py_RETURN_NONE;
    PyObject *held = (PyObject *)p;
    Py_INCREF(held);
    return held;
}

PyMethodDef ssl_scan_methods[] = {
    {"held_object", held_object, METH_VARARGS, held_object_doc},
    {"ssl_object_bytes", ssl_object_bytes, METH_VARARGS, ssl_object_bytes_doc},
    {"ssl_scan_peak", ssl_scan_peak, METH_NOARGS, ssl_scan_peak_doc},
    {"struct_object_bytes", struct_object_bytes, METH_VARARGS, struct_object_bytes_doc},
    {NULL, NULL, 0, NULL},
};

#pragma GCC visibility pop
