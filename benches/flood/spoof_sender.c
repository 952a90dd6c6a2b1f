/* Sends precomputed HandshakeInits to a server from spoofed IPv4 source addresses,
 * at a fixed rate, for the flood benchmark (benches/flood/run.py).
 *
 *   spoof_sender INITS_FILE INIT_LEN DEST_IP DEST_PORT SOURCE_NET SOURCE_COUNT RATE_PER_S SECONDS
 *
 * Datagram i carries init (i mod N) from source SOURCE_NET + (i mod SOURCE_COUNT)
 * (host order, so 198.19.0.0 with 65536 sources spans 198.19.0.0/16), source port
 * 1024 + (i mod 60000). Raw socket with IP_HDRINCL (the kernel fills in the IP
 * checksum and length), sendmmsg in batches, paced per batch against the monotonic
 * clock, until SECONDS have passed or SIGTERM. Prints one JSON line: datagrams sent, seconds, achieved rate, send errors.
 * Needs CAP_NET_RAW; run it in its own namespace. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define HEADERS (sizeof(struct iphdr) + sizeof(struct udphdr))

static volatile sig_atomic_t stop;

static void on_signal(int signum) {
    (void)signum;
    stop = 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: %s INITS_FILE INIT_LEN DEST_IP DEST_PORT SOURCE_NET SOURCE_COUNT RATE_PER_S SECONDS\n", argv[0]);
        return 2;
    }
    size_t init_len = strtoul(argv[2], NULL, 10);
    struct in_addr dest, source_net;
    if (init_len == 0 || init_len > 1400 || !inet_aton(argv[3], &dest) || !inet_aton(argv[5], &source_net)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    uint16_t dest_port = (uint16_t)atoi(argv[4]);
    uint32_t source_count = strtoul(argv[6], NULL, 10);
    double rate = atof(argv[7]), seconds = atof(argv[8]);
    if (source_count == 0 || rate <= 0 || seconds <= 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }

    FILE *file = fopen(argv[1], "rb");
    if (!file) { perror("inits file"); return 1; }
    fseek(file, 0, SEEK_END);
    long file_len = ftell(file);
    fseek(file, 0, SEEK_SET);
    size_t inits = file_len / init_len;
    if (inits == 0) { fprintf(stderr, "no inits in %s\n", argv[1]); return 1; }
    unsigned char *payloads = malloc(inits * init_len);
    if (!payloads || fread(payloads, init_len, inits, file) != inits) { perror("reading inits"); return 1; }
    fclose(file);

    int sock = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    if (sock < 0) { perror("raw socket"); return 1; }
    int one = 1;
    setsockopt(sock, IPPROTO_IP, IP_HDRINCL, &one, sizeof one);
    int sndbuf = 4 << 20;
    setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);

    static unsigned char frames[BATCH][HEADERS + 1500];
    struct iovec iov[BATCH];
    struct mmsghdr msgs[BATCH];
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr = dest};
    memset(msgs, 0, sizeof msgs);
    for (int b = 0; b < BATCH; b++) {
        iov[b].iov_base = frames[b];
        iov[b].iov_len = HEADERS + init_len;
        msgs[b].msg_hdr.msg_iov = &iov[b];
        msgs[b].msg_hdr.msg_iovlen = 1;
        msgs[b].msg_hdr.msg_name = &to;
        msgs[b].msg_hdr.msg_namelen = sizeof to;
    }

    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    uint64_t sent = 0, errors = 0, index = 0;
    double start = now_s(), end = start + seconds;
    uint32_t net = ntohl(source_net.s_addr);
    for (;;) {
        double now = now_s();
        if (now >= end || stop) break;
        /* Pace: never ahead of rate * elapsed. */
        double due = (now - start) * rate;
        if ((double)sent + BATCH > due) {
            struct timespec pause = {0, 200000}; /* 0.2 ms */
            nanosleep(&pause, NULL);
            continue;
        }
        for (int b = 0; b < BATCH; b++, index++) {
            unsigned char *frame = frames[b];
            struct iphdr *ip = (struct iphdr *)frame;
            struct udphdr *udp = (struct udphdr *)(frame + sizeof *ip);
            memset(frame, 0, HEADERS);
            ip->version = 4;
            ip->ihl = 5;
            ip->ttl = 64;
            ip->protocol = IPPROTO_UDP;
            ip->saddr = htonl(net + (uint32_t)(index % source_count));
            ip->daddr = dest.s_addr;
            udp->source = htons((uint16_t)(1024 + index % 60000));
            udp->dest = htons(dest_port);
            udp->len = htons((uint16_t)(sizeof *udp + init_len));
            udp->check = 0; /* optional over IPv4 */
            memcpy(frame + HEADERS, payloads + (index % inits) * init_len, init_len);
        }
        int done = sendmmsg(sock, msgs, BATCH, 0);
        if (done < 0) {
            errors++;
            if (errno != ENOBUFS && errno != EAGAIN) { perror("sendmmsg"); break; }
            continue;
        }
        sent += done;
    }
    double elapsed = now_s() - start;
    printf("{\"sent\": %llu, \"seconds\": %.3f, \"rate_per_s\": %.0f, \"send_errors\": %llu}\n",
           (unsigned long long)sent, elapsed, sent / elapsed, (unsigned long long)errors);
    return 0;
}
