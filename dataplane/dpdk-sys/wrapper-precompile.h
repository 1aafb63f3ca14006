
#include <wrapper.h>