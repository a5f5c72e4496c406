#include "reader_impl.h"
static int text_bid(const struct tq_sniff *sn) { return 0; }
const struct tq_rformat tq_rformat_text = { .name = "text", .bid = text_bid };
