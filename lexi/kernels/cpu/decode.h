/* A decode step's layers in one call (decode.c), over the records of decode_records.h. */
#ifndef LEXI_DECODE_H
#define LEXI_DECODE_H

#include "decode_records.h"
#include "qgemm.h"

/* NULL when the model's records can run on these kernels, else why not (checked once, when they are built). */
const char *decode_check_model(const isa_kernels *isa, const dec_model *m);

/* NULL when the step's rows, positions, block tables and slots stay inside the cache, else why not. */
const char *decode_check_step(const dec_model *m, const dec_step *s);

/* 0, or -1 when out of memory. */
int decode_layers(pool *p, workspace *ws, const isa_kernels *isa, const dec_model *m, const dec_step *s);

#endif
