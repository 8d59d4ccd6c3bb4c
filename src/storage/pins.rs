//! Template files pinned for accepted jobs: when SubmitRender accepts a job, its template's
//! JSON and fonts are copied inside the store to `templates/.jobs/<job-id>/` (a hard link
//! locally, a server-side copy in a bucket: no bytes pass through the server either way),
//! and the job renders from there. Deleting the template then removes only the template's
//! own objects (it is gone for every caller at once) while the jobs already accepted keep
//! their copies, which go when the job ends ([`TemplatePin`] is dropped) or, for pins a
//! crashed instance left, with the retention sweep ([`Pins::sweep`]). A copy
//! at admission was chosen over deferring the template's deletion until its jobs end: a
//! deferred delete needs a count of the jobs using each template that every instance keeps
//! right through crashes, while a job-scoped copy needs nothing shared and its key says
//! which job it belongs to. Pins take no quota, but keep the disk watermark: a job's files
//! and its output need room. [`Pins`] owns the `templates/.jobs/` keys; it copies from the
//! keys [`Templates`] and [`Images`] own.
//!
//! A render's replacement images (image slots) are written into its pin at admission,
//! `images/<sha256>` (their bytes came with the request; they are the job's alone), and go
//! with it.
//!
//! A worker has no network, so before it starts the instance that renders the job stages the
//! pinned files into its own scratch directory ([`TemplatePin::stage`]; locally the pin's
//! files are read where they are), never through a shared file system.

use super::disk::DiskWatermark;
use super::images::{is_image_id, Images};
use super::objects::ObjectStorage;
use super::templates::Templates;
use super::{StorageError, TEMPLATES};
use crate::spec::ImageSource;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// Directory of the pins, under the templates directory (not an id, so never taken for a
/// template).
pub(crate) const PINS_DIR: &str = ".jobs";

/// Scratch directory of staged inputs under the data directory (bucket mode).
const STAGED_DIR: &str = "staged";

/// The youngest pin the sweep may take for lost, whatever the retention: longer than any job
/// waits and renders (a render is capped at 30 minutes; the queue is short), so a short
/// retention never takes the files of a job still waiting.
pub(crate) const MIN_LOST_PIN_AGE: Duration = Duration::from_secs(2 * 3600);

fn pin_prefix(job: Uuid) -> String {
    format!("{TEMPLATES}/{PINS_DIR}/{job}")
}

/// Key of a replacement image of job `job`'s pin.
fn image_key(job: Uuid, sha256: &str) -> String {
    format!("{}/images/{sha256}", pin_prefix(job))
}

/// The template files of one accepted job; removed when dropped (the job has ended and its
/// board entry let go of its work).
#[derive(Debug)]
pub struct TemplatePin {
    objects: ObjectStorage,
    job: Uuid,
    /// Key of the template's JSON.
    template_key: String,
    /// The template's fonts: family → key.
    font_keys: BTreeMap<String, String>,
    /// The job's replacement images: SHA-256 → key.
    image_keys: BTreeMap<String, String>,
    /// Whether dropping this pin removes the files: true on the instance that accepted the
    /// job (it made the copies and keeps them until the job ends wherever it renders); false
    /// on an instance that took the job from the shared queue and only reads them.
    owned: bool,
}

/// A pin's files on this instance's disk, for one worker run; the staged copies are removed
/// when dropped.
#[derive(Debug)]
pub(crate) struct StagedInputs {
    pub template_path: PathBuf,
    /// Family → font file.
    pub fonts: BTreeMap<String, PathBuf>,
    /// SHA-256 → replacement image file.
    pub images: BTreeMap<String, PathBuf>,
    /// The directory of the staged copies (none locally: the pin's own files are read).
    staged_dir: Option<PathBuf>,
}

impl Drop for StagedInputs {
    fn drop(&mut self) {
        if let Some(dir) = &self.staged_dir {
            remove_dir(dir);
        }
    }
}

impl Drop for TemplatePin {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let prefix = pin_prefix(self.job);
        // Locally a few unlinks: short enough for any thread that drops the last reference.
        if let Some(dir) = self.objects.local_path(&prefix) {
            remove_dir(&dir);
            return;
        }
        // In a bucket, requests: started on the runtime, not waited for (the sweep takes
        // whatever fails).
        let objects = self.objects.clone();
        let keys: Vec<String> = std::iter::once(self.template_key.clone())
            .chain(self.font_keys.values().cloned())
            .chain(self.image_keys.values().cloned())
            .collect();
        self.objects.spawn(async move {
            for key in keys {
                if let Err(error) = objects.delete(&key).await {
                    tracing::warn!(key = %key, %error, "cannot remove a job's template files; the sweep will");
                }
            }
        });
    }
}

fn remove_dir(dir: &Path) {
    if let Err(error) = std::fs::remove_dir_all(dir) {
        if error.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %dir.display(), %error, "cannot remove a job's template files; the sweep will");
        }
    }
}

impl TemplatePin {
    /// The pinned files of job `job` as another instance named them (through the shared work
    /// queue), to read only: dropping it leaves them to their owner. Keys outside the job's
    /// own pin prefix are refused (`Damaged`): a queue entry never names other objects.
    /// `images` are the SHA-256s of the job's replacement images (its modifications).
    pub(crate) fn borrowed<'a>(
        objects: ObjectStorage,
        job: Uuid,
        template_key: String,
        font_keys: BTreeMap<String, String>,
        images: impl IntoIterator<Item = &'a str>,
    ) -> Result<TemplatePin, StorageError> {
        let mut image_keys = BTreeMap::new();
        for sha256 in images {
            if !is_image_id(sha256) {
                return Err(StorageError::Damaged(format!(
                    "job {job}'s queue entry names an image {sha256:?}, not a SHA-256"
                )));
            }
            image_keys.insert(sha256.to_owned(), image_key(job, sha256));
        }
        let prefix = format!("{}/", pin_prefix(job));
        let outside = std::iter::once(&template_key)
            .chain(font_keys.values())
            .find(|key| !key.starts_with(&prefix) || key.contains(".."));
        if let Some(key) = outside {
            return Err(StorageError::Damaged(format!(
                "job {job}'s queue entry names {key:?}, not one of its pinned files"
            )));
        }
        Ok(TemplatePin {
            objects,
            job,
            template_key,
            font_keys,
            image_keys,
            owned: false,
        })
    }

    /// Key of the pinned template JSON.
    pub(crate) fn template_key(&self) -> &str {
        &self.template_key
    }

    /// Keys of the pinned fonts: family → key.
    pub(crate) fn font_keys(&self) -> &BTreeMap<String, String> {
        &self.font_keys
    }

    /// The pin's files as a worker reads them: locally the pin's own files, in a bucket
    /// copies downloaded into this instance's scratch directory (streamed). Blocking.
    pub(crate) fn stage(&self) -> Result<StagedInputs, StorageError> {
        if let Some(template_path) = self.objects.local_path(&self.template_key) {
            let fonts = self
                .font_keys
                .iter()
                .filter_map(|(family, key)| Some((family.clone(), self.objects.local_path(key)?)))
                .collect();
            let images = self
                .image_keys
                .iter()
                .filter_map(|(sha256, key)| Some((sha256.clone(), self.objects.local_path(key)?)))
                .collect();
            return Ok(StagedInputs {
                template_path,
                fonts,
                images,
                staged_dir: None,
            });
        }
        let dir = self
            .objects
            .data_dir()
            .join(STAGED_DIR)
            .join(self.job.to_string());
        std::fs::create_dir_all(&dir)?;
        // From here on, dropping the staged inputs removes whatever was downloaded.
        let mut staged = StagedInputs {
            template_path: dir.join("template.json"),
            fonts: BTreeMap::new(),
            images: BTreeMap::new(),
            staged_dir: Some(dir.clone()),
        };
        self.objects.block_on(
            self.objects
                .download_file(&self.template_key, &staged.template_path),
        )?;
        for (index, (family, key)) in self.font_keys.iter().enumerate() {
            // Numbered: family names are caller text and never reach a path.
            let path = dir.join(format!("{index}.font"));
            self.objects
                .block_on(self.objects.download_file(key, &path))?;
            staged.fonts.insert(family.clone(), path);
        }
        for (sha256, key) in &self.image_keys {
            // Checked to be hex digits when the pin was made.
            let path = dir.join(format!("{sha256}.image"));
            self.objects
                .block_on(self.objects.download_file(key, &path))?;
            staged.images.insert(sha256.clone(), path);
        }
        Ok(staged)
    }
}

/// The pins of accepted jobs in one object store.
#[derive(Debug, Clone)]
pub(crate) struct Pins {
    objects: ObjectStorage,
    disk: DiskWatermark,
}

impl Pins {
    /// The pins in `objects`, refused below the `disk` watermark (only the pins' directory is
    /// made, in local mode).
    pub(crate) fn new(objects: ObjectStorage, disk: DiskWatermark) -> Result<Pins, StorageError> {
        if let Some(dir) = objects.local_path(&format!("{TEMPLATES}/{PINS_DIR}")) {
            std::fs::create_dir_all(dir)?;
        }
        Ok(Pins { objects, disk })
    }

    /// Pins `record`'s files for job `job`. A template deleted meanwhile is `NotFound` (its
    /// objects are gone, so nothing can be copied): the submission is refused as if it had
    /// come after the deletion. Blocking.
    #[cfg(test)]
    pub fn pin(
        &self,
        record: &super::TemplateRecord,
        job: Uuid,
    ) -> Result<TemplatePin, StorageError> {
        self.pin_files(
            record.id,
            &record.fonts,
            &record.tenant,
            &BTreeMap::new(),
            job,
        )
    }

    /// [`Pins::pin`] of template `id` whose font files (family → file, from its record) are
    /// `fonts`, with the job's replacement images (SHA-256 → bytes) written beside them.
    /// Refused first on a nearly full disk: the job's output will need room.
    pub(crate) fn pin_files(
        &self,
        id: Uuid,
        fonts: &BTreeMap<String, String>,
        tenant: &crate::auth::TenantId,
        images: &BTreeMap<String, ImageSource>,
        job: Uuid,
    ) -> Result<TemplatePin, StorageError> {
        self.disk.check()?;
        let prefix = pin_prefix(job);
        // From here on, dropping the pin removes whatever was copied.
        let mut pin = TemplatePin {
            objects: self.objects.clone(),
            job,
            template_key: format!("{prefix}/template.json"),
            font_keys: BTreeMap::new(),
            image_keys: BTreeMap::new(),
            owned: true,
        };
        let gone = |error: StorageError| match error {
            StorageError::ObjectMissing(_) => StorageError::NotFound(id),
            other => other,
        };
        self.objects
            .block_on(
                self.objects
                    .copy(&Templates::json_key(id), &pin.template_key),
            )
            .map_err(gone)?;
        for (family, file) in fonts {
            // File names come from the record (numbered by us), never from the caller.
            let key = format!("{prefix}/{file}");
            self.objects
                .block_on(self.objects.copy(&Templates::font_key(id, file), &key))
                .map_err(gone)?;
            pin.font_keys.insert(family.clone(), key);
        }
        for (sha256, source) in images {
            if !is_image_id(sha256) {
                return Err(StorageError::Damaged(format!(
                    "an image named {sha256:?}, not a SHA-256"
                )));
            }
            let key = image_key(job, sha256);
            // Recorded first: a failed write is removed with the pin.
            pin.image_keys.insert(sha256.clone(), key.clone());
            match source {
                ImageSource::Sent(bytes) => self
                    .objects
                    .block_on(self.objects.put(&key, bytes.clone()))?,
                ImageSource::Uploaded => self
                    .objects
                    .block_on(self.objects.copy(&Images::key(tenant, sha256), &key))
                    .map_err(|error| match error {
                        StorageError::ObjectMissing(_) => {
                            StorageError::ImageNotFound(sha256.clone())
                        }
                        other => other,
                    })?,
            }
        }
        Ok(pin)
    }

    /// Removes pins older than `retention` (and [`MIN_LOST_PIN_AGE`]): no job waits or
    /// renders that long, so they were left by an instance that stopped without ending its
    /// jobs. Answers how many. Blocking.
    pub(crate) fn sweep(&self, retention: Duration) -> Result<usize, StorageError> {
        self.sweep_older_than(retention.max(MIN_LOST_PIN_AGE))
    }

    fn sweep_older_than(&self, age_limit: Duration) -> Result<usize, StorageError> {
        let now = SystemTime::now();
        let old =
            |modified: SystemTime| now.duration_since(modified).unwrap_or_default() >= age_limit;
        // Inputs staged on this instance's disk (bucket mode) are removed when their worker
        // run ends; those of a process killed mid-render are taken here, as old as a lost pin.
        let staged = self.objects.data_dir().join(STAGED_DIR);
        if let Ok(entries) = std::fs::read_dir(&staged) {
            for entry in entries.flatten() {
                let modified = entry.metadata().and_then(|meta| meta.modified());
                if matches!(modified, Ok(modified) if old(modified)) {
                    remove_dir(&entry.path());
                }
            }
        }
        let pins = format!("{TEMPLATES}/{PINS_DIR}");
        if let Some(dir) = self.objects.local_path(&pins) {
            // Locally by the pin directory's age: its files are links sharing the template's
            // own (older) modification time.
            let mut removed = 0;
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
                Err(error) => return Err(error.into()),
            };
            for entry in entries {
                let entry = entry?;
                let modified = entry.metadata().and_then(|meta| meta.modified());
                if matches!(modified, Ok(modified) if old(modified)) {
                    remove_dir(&entry.path());
                    removed += 1;
                }
            }
            return Ok(removed);
        }
        // In a bucket each copy is a new object, dated when the job was accepted.
        self.objects.block_on(async {
            let mut removed = 0;
            for object in self.objects.list(&pins).await? {
                if old(object.modified) {
                    self.objects.delete(&object.key).await?;
                    removed += 1;
                }
            }
            Ok::<usize, StorageError>(removed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::TenantId;
    use crate::storage::TemplateRecord;

    /// JSON of the template [`store_template`] stores (with a font "Sans" of [`FONT`]).
    const JSON: &[u8] = br#"{"v":"5","fr":30,"ip":0,"op":30,"w":10,"h":10,"layers":[]}"#;
    const FONT: &[u8] = b"OTTO....";

    fn store_template(templates: &Templates, tenant: &TenantId) -> TemplateRecord {
        let report = crate::lottie::report::InspectReport::new(
            &crate::lottie::Template::parse(JSON).unwrap(),
        )
        .unwrap();
        let fonts = [("Sans".to_owned(), FONT.to_vec())].into();
        templates
            .create_copied(tenant, "t", JSON, report, &fonts)
            .unwrap()
    }

    /// The templates and pins of a store in a temporary directory (on a runtime of its own,
    /// kept as long as the store) with one template of the default tenant.
    struct PinFixture {
        runtime: tokio::runtime::Runtime,
        dir: tempfile::TempDir,
        templates: Templates,
        pins: Pins,
        record: TemplateRecord,
    }

    fn stored_template() -> PinFixture {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let objects = ObjectStorage::local(dir.path(), runtime.handle().clone()).unwrap();
        let templates = Templates::open(objects.clone()).unwrap();
        // No watermark: these tests are about the files, not the disk.
        let pins = Pins::new(objects.clone(), DiskWatermark::new(&objects, 0)).unwrap();
        let record = store_template(&templates, &TenantId::default_tenant());
        PinFixture {
            runtime,
            dir,
            templates,
            pins,
            record,
        }
    }

    /// Stages `pin`, checks that the staged files hold the template's JSON and font, drops the
    /// staging and the pin, and answers where the staged template was.
    fn staged_and_dropped(pin: TemplatePin) -> PathBuf {
        let staged = pin.stage().unwrap();
        assert_eq!(std::fs::read(&staged.template_path).unwrap(), JSON);
        assert_eq!(std::fs::read(&staged.fonts["Sans"]).unwrap(), FONT);
        staged.template_path.clone()
    }

    #[test]
    fn a_pinned_template_outlives_its_deletion_until_the_pin_is_dropped() {
        let PinFixture {
            dir,
            templates,
            pins,
            record,
            // Kept to the test's end: the store's calls run on it.
            runtime: _runtime,
        } = stored_template();
        let pin = pins.pin(&record, Uuid::new_v4()).unwrap();
        templates
            .delete(&TenantId::default_tenant(), record.id)
            .unwrap();
        assert!(matches!(
            pins.pin(&record, Uuid::new_v4()),
            Err(StorageError::NotFound(id)) if id == record.id
        ));
        let pinned = staged_and_dropped(pin);
        assert!(!pinned.exists());
        let pins_dir = dir.path().join(TEMPLATES).join(PINS_DIR);
        let left: Vec<_> = std::fs::read_dir(pins_dir).unwrap().collect();
        assert!(left.is_empty(), "the refused pin left {left:?}");
    }

    #[test]
    fn a_borrowed_pin_reads_the_owners_files_leaves_them_when_dropped_and_names_no_others() {
        let PinFixture {
            templates,
            pins,
            record,
            // Kept to the test's end: the store's calls run on it.
            runtime: _runtime,
            // The store's directory, removed when dropped.
            dir: _dir,
        } = stored_template();
        let job = Uuid::new_v4();
        let owner = pins.pin(&record, job).unwrap();
        let borrow = |template: &str, fonts: &BTreeMap<String, String>| {
            TemplatePin::borrowed(
                templates.objects().clone(),
                job,
                template.to_owned(),
                fonts.clone(),
                [],
            )
        };
        let borrowed = borrow(owner.template_key(), owner.font_keys()).unwrap();
        let pinned = staged_and_dropped(borrowed);
        assert!(pinned.exists(), "a borrowed pin removed its owner's files");
        // Keys outside the job's own pins: the template itself, another job's pin, a way up.
        let other_job = format!("{}/{PINS_DIR}/{}/template.json", TEMPLATES, Uuid::new_v4());
        let up = format!("{}/../../{}/template.json", pin_prefix(job), record.id);
        for template in [Templates::json_key(record.id), other_job, up] {
            assert!(
                matches!(
                    borrow(&template, &BTreeMap::new()),
                    Err(StorageError::Damaged(_))
                ),
                "{template} was accepted"
            );
        }
        let font = [("Sans".to_owned(), Templates::font_key(record.id, "0.font"))].into();
        assert!(matches!(
            borrow(owner.template_key(), &font),
            Err(StorageError::Damaged(_))
        ));
        drop(owner);
        assert!(!pinned.exists());
    }

    #[test]
    fn a_jobs_images_are_pinned_staged_read_by_a_borrower_and_removed_with_the_pin() {
        let PinFixture {
            templates,
            pins,
            record,
            // Kept to the test's end: the store's calls run on it.
            runtime: _runtime,
            // The store's directory, removed when dropped.
            dir: _dir,
        } = stored_template();
        let job = Uuid::new_v4();
        let sha256 = crate::lottie::reading::template::hex_sha256(b"image bytes");
        let images = [(
            sha256.clone(),
            ImageSource::Sent(bytes::Bytes::from_static(b"image bytes")),
        )]
        .into();
        let owner = pins
            .pin_files(record.id, &record.fonts, &record.tenant, &images, job)
            .unwrap();
        let staged = owner.stage().unwrap();
        assert_eq!(
            std::fs::read(&staged.images[&sha256]).unwrap(),
            b"image bytes"
        );
        let borrowed = TemplatePin::borrowed(
            templates.objects().clone(),
            job,
            owner.template_key().to_owned(),
            owner.font_keys().clone(),
            [sha256.as_str()],
        )
        .unwrap();
        assert_eq!(
            borrowed.stage().unwrap().images[&sha256],
            staged.images[&sha256]
        );
        // A queue entry's image names are never trusted to be paths.
        for hostile in ["../../record.json", "ABC", ""] {
            assert!(matches!(
                TemplatePin::borrowed(
                    templates.objects().clone(),
                    job,
                    owner.template_key().to_owned(),
                    BTreeMap::new(),
                    [hostile],
                ),
                Err(StorageError::Damaged(_))
            ));
        }
        let image = staged.images[&sha256].clone();
        drop((staged, borrowed, owner));
        assert!(!image.exists(), "the pinned image outlived its job");
    }

    #[test]
    fn the_sweep_removes_only_pins_older_than_any_job_lives() {
        let PinFixture {
            dir,
            pins,
            record,
            runtime: _runtime,
            ..
        } = stored_template();
        let pin = pins.pin(&record, Uuid::new_v4()).unwrap();
        let staged = pin.stage().unwrap();
        // What a process killed mid-render left staged (bucket mode) for another job.
        let left_staged = dir.path().join(STAGED_DIR).join(Uuid::new_v4().to_string());
        std::fs::create_dir_all(&left_staged).unwrap();
        std::fs::write(left_staged.join("template.json"), JSON).unwrap();
        assert_eq!(pins.sweep(Duration::ZERO).unwrap(), 0, "too young");
        assert!(staged.template_path.exists() && left_staged.exists());
        assert_eq!(pins.sweep_older_than(Duration::ZERO).unwrap(), 1);
        assert!(!staged.template_path.exists());
        assert!(!left_staged.exists(), "staged inputs left behind");
    }
}
