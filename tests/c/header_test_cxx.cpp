// The same header test, compiled as C++ (-std=c++11 -pedantic -Werror).
#include "header_test.c"
