/* ember/export.h: symbol visibility. Every public function carries EMBER_API; everything else in
 * the library is hidden (-fvisibility=hidden), so `nm -D libember.so` lists only ember_ symbols. */
#ifndef EMBER_EXPORT_H
#define EMBER_EXPORT_H

#if defined(EMBER_STATIC_DEFINE)
#define EMBER_API
#elif defined(_WIN32)
#if defined(EMBER_BUILDING)
#define EMBER_API __declspec(dllexport)
#else
#define EMBER_API __declspec(dllimport)
#endif
#else
#define EMBER_API __attribute__((visibility("default")))
#endif

#if defined(__GNUC__) || defined(__clang__)
#define EMBER_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define EMBER_DEPRECATED(msg)
#endif

#endif
