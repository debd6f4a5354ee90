/*
 * The descriptors of the client's wait fd (waitfd.h).
 */
#define _GNU_SOURCE
#include "waitfd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

void rm_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

/* An epoll instance watching efd and tfd for reading, or -1. */
static int make_epoll(int efd, int tfd)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.fd = efd;
    if (epfd >= 0 && epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev) == 0) {
        ev.data.fd = tfd;
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &ev) == 0)
            return epfd;
    }
    if (epfd >= 0)
        close(epfd);
    return -1;
}

int rm_waitfd_make(int *epfd, int *efd, int *tfd)
{
    *efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    *tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    *epfd = *efd >= 0 && *tfd >= 0 ? make_epoll(*efd, *tfd) : -1;
    if (*epfd >= 0)
        return 0;
    int saved = errno;
    if (*efd >= 0)
        close(*efd);
    if (*tfd >= 0)
        close(*tfd);
    errno = saved;
    return -1;
}

void rm_waitfd_renew(int old_epfd, int old_efd, int old_tfd)
{
    int epfd, efd, tfd;
    if (rm_waitfd_make(&epfd, &efd, &tfd) != 0)
        return;
    close(epfd);
    dup3(efd, old_efd, O_CLOEXEC);
    dup3(tfd, old_tfd, O_CLOEXEC);
    close(efd);
    close(tfd);
    /* The new epoll instance watches the numbers the old one did. */
    epfd = make_epoll(old_efd, old_tfd);
    if (epfd >= 0) {
        dup3(epfd, old_epfd, O_CLOEXEC);
        close(epfd);
    }
}
