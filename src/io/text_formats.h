/* Internal: the text corpora's file formats, split from file reading so that they can be fuzzed
 * and tested on bytes in memory (fuzz/fuzz_kjv.c, fuzz/fuzz_cmudict.c):
 *   - compress(1)'s LZW stream (".Z"), which the Bible package's container holds;
 *   - that container ("EC02", from the Bible Retrieval System of Debian's bible-kjv-text);
 *   - the verse text inside it ("Ge1:1 In the beginning ...");
 *   - CMUdict's cmudict.dict lines.
 * Every parser treats its input as hostile: it never reads outside [bytes, bytes + n), never
 * writes past the capacity it was given, and reports what is wrong with EG_ERR_FORMAT and a
 * message that starts with name_for_errors (may be NULL: "data"). */
#ifndef EAGLE_SRC_IO_TEXT_FORMATS_H
#define EAGLE_SRC_IO_TEXT_FORMATS_H

#include <stddef.h>
#include <stdint.h>

#include "eagle/io.h"
#include "eagle/status.h"

/* Files larger than this are refused (each loader reads its whole file into memory). */
#define EG__TEXT_MAX_BYTES ((size_t)1 << 30)

/* Reads the whole file into a new malloc'd buffer (*bytes, freed by the caller) with one NUL byte
 * after its n bytes, so that parsers may treat it as a string too. `what` names the kind of file
 * in messages ("a text file"); `hint` (may be NULL) is added to the message when the file cannot
 * be opened ("install ..."). Errors: EG_ERR_IO (cannot open or read, a directory), EG_ERR_FORMAT
 * (larger than max_bytes), EG_ERR_OUT_OF_MEMORY; *bytes is then NULL. */
eg_status eg__read_whole_file(const char *path, size_t max_bytes, const char *what,
                              const char *hint, char **bytes, size_t *n);

/* ---- LZW ---- */

/* Decodes one compress(1) stream: its 3-byte header (0x1F 0x9D, then flags: bits 0-4 the largest
 * code width, 9..16; bit 7 block mode, in which code 256 clears the table) and the codes, into
 * out[0 .. *produced). Decoding more than `capacity` bytes is an error (so a tiny stream cannot
 * expand without bound); out may be NULL only when capacity is 0. Trailing bits too few for a
 * code end the stream. Errors (EG_ERR_FORMAT): a bad header, a code that is not yet in the table,
 * output past capacity. */
eg_status eg__lzw_decode(const uint8_t *in, size_t n, uint8_t *out, size_t capacity,
                         size_t *produced, const char *name_for_errors);

/* ---- the Bible Retrieval System's container ---- */

/* Magic at the start of the container. */
#define EG__EC02_MAGIC "EC02"

/* Layout (all numbers big-endian u32), as found in /usr/lib/bible.data:
 *   0x00  "EC02" and a description ("Compressed Data File"), zero-padded
 *   0x54  block_size: bytes each block decompresses to (the last one may hold fewer)
 *   0x58  n_blocks
 *   0x5C  n_blocks + 1 offsets from the start of the file, increasing; block i is the bytes
 *         [offsets[i], offsets[i + 1]), the last offset is the file's size
 *   then  the 3-byte compress header that every block's LZW stream shares (the bytes just before
 *         offsets[0]), then the blocks, each an LZW stream without its header.
 * Decodes every block into one new malloc'd buffer (*text, NUL-terminated after *n bytes): every
 * block but the last must give exactly block_size bytes. Errors: EG_ERR_FORMAT (a bad header or
 * offset table, a block's stream, a block of the wrong size, more than max_bytes in all),
 * EG_ERR_OUT_OF_MEMORY. */
eg_status eg__ec02_decode(const uint8_t *bytes, size_t n, size_t max_bytes, char **text,
                          size_t *text_n, const char *name_for_errors);

/* ---- the KJV verse text ---- */

/* Parses the verse text (or, when it starts with EG__EC02_MAGIC, the container first) into *out
 * (see eg_kjv in include/eagle/io.h). Lines before the first verse (the title) are skipped; every
 * other line is "<book><chapter>:<verse> <text>", where <book> is the file's abbreviation, the
 * books come in eg_kjv's order, each starting at 1:1, and verses count up by one (or the next
 * chapter starts at verse 1). Lines end with "\n" (a "\r" before it is dropped); empty lines are
 * skipped. A verse's text is kept byte for byte. Errors (EG_ERR_FORMAT, naming the line):
 * a line that is not a verse after the first verse, an unknown or out-of-order book, a chapter or
 * verse out of sequence, a NUL or other control byte, a book missing at the end; also
 * EG_ERR_OUT_OF_MEMORY. On failure *out is zeroed. */
eg_status eg__kjv_parse(const char *bytes, size_t n, const char *name_for_errors, eg_kjv *out);

/* ---- CMUdict ---- */

/* Parses cmudict.dict text into *out (see eg_cmudict in include/eagle/io.h), holding out
 * test_fraction of the distinct words with `seed`. Errors: EG_ERR_INVALID_ARGUMENT (test_fraction
 * not in [0, 1]), EG_ERR_FORMAT naming the line (a word without phonemes, an unknown phoneme, a
 * bad "(n)" suffix, a word and variant given twice, a NUL or other control byte), EG_ERR_OUT_OF_
 * MEMORY. On failure *out is zeroed. */
eg_status eg__cmudict_parse(const char *bytes, size_t n, double test_fraction, uint64_t seed,
                            const char *name_for_errors, eg_cmudict *out);

#endif
