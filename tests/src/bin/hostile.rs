//! Writes the hostile recordings of `dropscope_tests::hostile` into a directory, to reproduce
//! by hand what the tests check: `hostile DIR`.
use dropscope_tests::hostile;

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    let dir = std::path::Path::new(&dir);
    let files = [
        ("bomb-66k.dsrec", hostile::empty_stack_bomb(1)),
        ("bomb-263k.dsrec", hostile::empty_stack_bomb(4)),
        ("deep-100000.dsrec", hostile::deep_stack(100_000)),
        ("deep-16000.dsrec", hostile::deep_stack(16_000)),
        ("deep-1024.dsrec", hostile::deep_stack(1024)),
        ("long-name.dsrec", hostile::long_name_stack(65_536, 1000)),
        ("long-location.dsrec", hostile::long_location(65_536)),
        ("escaping-names.dsrec", hostile::escaping_names()),
        ("invalid-xml.dsrec", hostile::invalid_xml_names()),
        ("huge-weights.dsrec", hostile::huge_weights()),
    ];
    for (name, rec) in files {
        let path = dir.join(name);
        rec.write(&path);
        println!("{} ({} bytes)", path.display(), rec.bytes().len());
    }
}
