#include "reader_impl.h"
static int w2v_bid(const struct tq_sniff *sn) { return 0; }
const struct tq_rformat tq_rformat_w2v = { .name = "word2vec", .bid = w2v_bid };
