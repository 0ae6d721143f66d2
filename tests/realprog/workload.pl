# A Perl workload for the real-program test: hashes, sort, regexes, string building.
use strict;
use warnings;

my $x = 42;
sub rnd { $x = ($x * 1103515245 + 12345) % 2147483648; return $x; }

my %h;
my @words;
for my $i (1 .. 60000) {
    my $w = join '', map { chr(97 + rnd() % 26) } 1 .. (1 + rnd() % 12);
    push @words, $w;
    $h{$w}++;
    $h{"n$i"} = $w x (1 + $i % 5) if $i % 7 == 0;
}
my @top = (sort { $h{$b} <=> $h{$a} || $a cmp $b } grep { !/^n\d/ } keys %h)[0 .. 9];
print "top: @top\n";
print "keys: ", scalar(keys %h), "\n";

my $text = join ' ', @words;
my $vowels = () = $text =~ /[aeiou]/g;
my @pairs = $text =~ /\b(\w)(\w)\2\1\b/g;
(my $swapped = substr($text, 0, 20000)) =~ s/(\w+) (\w+)/$2 $1/g;
print "length ", length($text), " vowels $vowels pairs ", scalar(@pairs), "\n";
print "swapped ", substr($swapped, 0, 60), "\n";

my %groups;
push @{ $groups{ length $_ } }, $_ for @words;
for my $len (sort { $a <=> $b } keys %groups) {
    my @s = sort @{ $groups{$len} };
    printf "len %2d count %5d first %s last %s\n", $len, scalar(@s), $s[0], $s[-1];
}
delete $h{$_} for grep { /a/ } keys %h;
print "after delete: ", scalar(keys %h), "\n";
my @nums = sort { $a <=> $b } map { rnd() % 1000000 } 1 .. 100000;
print "median $nums[50000] sum ", eval { my $s = 0; $s += $_ for @nums; $s }, "\n";
