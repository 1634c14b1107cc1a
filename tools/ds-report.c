#include "config.h"
#include <stdio.h>
int main(void) { printf("features: %s\n", DS_FEATURES); return 0; }
