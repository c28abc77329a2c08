/* dispatch/version.c: the library's version at run time (see ember/version.h). */
#include <ember/version.h>

const char *ember_version_string(void) { return EMBER_VERSION_STRING; }
int ember_version_number(void) { return EMBER_VERSION_NUMBER; }
