/* Moved: the one check.h is tests/helpers/check.h. This forwarder keeps unit tests that
 * still say #include "check.h" building; include "../helpers/check.h" instead. */
#include "../helpers/check.h"
