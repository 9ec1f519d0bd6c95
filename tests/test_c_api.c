#include "flashattn/flashattn.h"
int main(void) { return 0; }
